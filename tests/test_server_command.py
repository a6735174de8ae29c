"""`citeflow server start|status|stop` and `citeflow runs`: one local Prefect server that runs and the UI
share, found by `citeflow run` with no PREFECT_API_URL set, and stopped with everything it started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest
from conftest import REPO

from cli.server import free_port

pytestmark = pytest.mark.server
CITEFLOW = str(Path(sys.executable).parent / "citeflow")


def citeflow(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CITEFLOW, *args], env=env, capture_output=True, text=True, timeout=300)


def test_a_run_goes_to_the_running_server_and_runs_lists_it(tmp_path: Path) -> None:
    env = {name: value for name, value in os.environ.items() if name != "PREFECT_API_URL"}
    db, port = str(tmp_path / "store.duckdb"), free_port()
    assert citeflow("ingest", str(REPO / "docs"), "--db", db, env=env).returncode == 0
    assert citeflow("server", "status", "--db", db, env=env).returncode == 1

    started = citeflow("server", "start", "--db", db, "--port", str(port), env=env)
    try:
        assert started.returncode == 0, started.stderr
        assert f"running at http://127.0.0.1:{port}" in started.stdout
        status = citeflow("server", "status", "--db", db, env=env)
        assert status.returncode == 0 and f"http://127.0.0.1:{port}" in status.stdout
        pid = int(status.stdout.split("(pid ")[1].split(",")[0])

        run = citeflow("run", "Where does citeflow keep the search index?", "--db", db, "--json", env=env)
        assert run.returncode == 0, run.stderr[-3000:]
        assert "temporary" not in run.stderr  # the running server was used
        run_id = __import__("json").loads(run.stdout)["run_id"]
        flow_run = httpx.get(f"http://127.0.0.1:{port}/api/flow_runs/{run_id}", timeout=30).json()
        assert flow_run["state"]["type"] == "COMPLETED"

        status_of_run = __import__("json").loads(run.stdout)["status"]
        runs = citeflow("runs", "--db", db, env=env)
        assert runs.returncode == 0 and f"{run_id}  {status_of_run}" in runs.stdout
    finally:
        stopped = citeflow("server", "stop", "--db", db, env=env)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert citeflow("server", "status", "--db", db, env=env).returncode == 1


def test_the_temporary_server_takes_the_port_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli.server import temporary_server

    port = free_port()
    monkeypatch.setenv("CITEFLOW_TEMPORARY_SERVER_PORT", str(port))

    with temporary_server(tmp_path / "store.duckdb") as url:
        health = httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=30)

    assert url == f"http://127.0.0.1:{port}/api" and health.status_code == 200
