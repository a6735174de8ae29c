"""Fixtures shared by the flow, command-line and evaluation tests.

Prefect reads its settings on import, so the environment is set here before any test imports it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Tests choose their own model endpoints, stores and providers: none leaks in from the shell.
for name in [*os.environ]:
    if (
        name.startswith("CITEFLOW_")
        and name != "CITEFLOW_SHARED"
        or name in {"OPENAI_BASE_URL", "OPENAI_API_KEY", "SEARXNG_URL", "TAVILY_API_KEY"}
    ):
        del os.environ[name]
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="citeflow-prefect-"))
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

REPO = Path(__file__).resolve().parent.parent
# CI clones the repository with a copy of shared/ beside it, as on a developer's machine.
SHARED = Path(os.environ.get("CITEFLOW_SHARED", REPO.parent / "shared"))
EVAL = SHARED / "eval"


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[None]:
    """A temporary Prefect server for the whole session; flows run against it for real."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def eval_dir() -> Path:
    if not (EVAL / "hotpotqa-100.corpus.jsonl").exists():
        pytest.fail(f"the evaluation data is missing: {EVAL} (set CITEFLOW_SHARED to the shared/ folder)")
    return EVAL


@pytest.fixture
def docs_db(tmp_path: Path) -> Path:
    """A store holding the documents that ship with citeflow, as the Quickstart loads them."""
    from storage.ingest import ingest_paths
    from storage.store import get_store

    db = tmp_path / "docs.duckdb"
    ingest_paths(get_store(db), [REPO / "docs", REPO / "storage" / "SCHEMA.md"])
    return db
