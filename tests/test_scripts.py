"""scripts/test runs every stage (lint, imports, tests, quick benchmarks) whatever failed before, and says
which failed. Checked in a copy of the script beside stand-in tools that record their calls."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from conftest import REPO


def project_with_tools(root: Path, failing: set[str]) -> Path:
    """A folder holding scripts/test, a setup that does nothing, and .venv/bin tools that log their
    arguments to calls.log and fail when named in `failing`."""
    (root / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "test", root / "scripts" / "test")
    (root / "scripts" / "setup").write_text("#!/usr/bin/env bash\nexit 0\n")
    (root / "scripts" / "setup").chmod(0o755)
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("ruff", "lint-imports", "python"):
        code = 1 if tool in failing else 0
        (bin_dir / tool).write_text(f'#!/usr/bin/env bash\necho "{tool} $*" >> calls.log\nexit {code}\n')
        (bin_dir / tool).chmod(0o755)
    return root


def test_every_stage_runs_after_a_failure_and_the_failures_are_named(tmp_path: Path) -> None:
    root = project_with_tools(tmp_path, failing={"ruff", "python"})

    done = subprocess.run(["scripts/test", "-k", "x"], cwd=root, capture_output=True, text=True, timeout=60)

    assert done.returncode == 1
    calls = (root / "calls.log").read_text().splitlines()
    assert calls == [
        "ruff check .",
        "lint-imports --no-cache",
        "python -m pytest -q -ra -k x",
        "python benchmarks/bench.py --quick",
    ]
    assert "failed: lint tests benchmarks" in done.stderr


def test_all_stages_passing_exit_zero(tmp_path: Path) -> None:
    root = project_with_tools(tmp_path, failing=set())

    done = subprocess.run(["scripts/test"], cwd=root, capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr
    assert len((root / "calls.log").read_text().splitlines()) == 4
