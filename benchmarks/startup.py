"""Cold start and memory: `citeflow run` as a user starts it, in a process of its own.

`first_task` runs `citeflow run QUESTION --refresh --json` against the simulation and returns the seconds
from the command's start to its first task (the plan task's trace row, started inside the task), with the
run's whole time. It reaches the Prefect server the way `citeflow run` does: the `citeflow server` of the
store's folder when one is up, else a temporary server on that folder's Prefect database. While the run
goes, the resident memory of its whole process tree (the run and any server it started) is sampled.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

import psutil

from storage.store import EvidenceStore

REPO = Path(__file__).resolve().parent.parent
CITEFLOW = Path(sys.executable).parent / "citeflow"


@dataclass
class StartFigures:
    first_task: float  # seconds from the command's start to the plan task's start
    run_row: float  # seconds from the command's start to its run row (written as the flow function begins)
    wall: float  # seconds from the command's start to its exit
    peak_tree_mb: float  # resident memory of the run and its children, at its highest
    peak_run_mb: float  # of the citeflow process alone
    status: str


class TreeMemory:
    """Samples the resident memory of a process and its descendants every `interval` seconds."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.root = psutil.Process(pid)
        self.interval = interval
        self.peak_tree = 0
        self.peak_root = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                root = self.root.memory_info().rss
                tree = root + sum(child.memory_info().rss for child in self.root.children(recursive=True))
            except psutil.Error:  # a process ended between listing and reading it
                continue
            self.peak_root = max(self.peak_root, root)
            self.peak_tree = max(self.peak_tree, tree)
            self._stop.wait(self.interval)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def child_environment(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment for a `citeflow run`, without the API URL the benchmark itself uses, so
    that the run finds its server as a user's run would."""
    env = {name: value for name, value in os.environ.items() if name != "PREFECT_API_URL"}
    return env | extra


def first_task(db: Path, question: str, environment: dict[str, str], flags: dict[str, Any]) -> StartFigures:
    """One `citeflow run` in a process of its own; raises if it produced no report."""
    command = [str(CITEFLOW), "run", question, "--db", str(db), "--reports", str(db.parent / "reports"),
               "--search", "searxng", "--refresh", "--json"]  # fmt: skip
    for name, value in flags.items():
        command += ["--set", f"{name}={value}"]
    started = time.time()
    process = subprocess.Popen(
        command, env=child_environment(environment), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    with TreeMemory(process.pid) as memory:
        out, err = process.communicate()
    wall = time.time() - started
    if process.returncode != 0:
        raise RuntimeError(f"citeflow run exited {process.returncode}: {err[-800:]}")
    with EvidenceStore.open(db) as store, store.cursor() as cur:
        (plan_started,) = cur.execute(  # type: ignore[misc]
            "SELECT min(started_at) FROM traces WHERE stage = 'plan' AND actor != 'cache'"
        ).fetchone()
        status, run_started = cur.execute("SELECT status, started_at FROM runs").fetchone()  # type: ignore[misc]
    return StartFigures(
        first_task=plan_started.replace(tzinfo=UTC).timestamp() - started,
        run_row=run_started.replace(tzinfo=UTC).timestamp() - started,
        wall=wall,
        peak_tree_mb=memory.peak_tree / 2**20,
        peak_run_mb=memory.peak_root / 2**20,
        status=status,
    )
