"""`prefect server start` on a loopback port: a run from the command line, checked through Prefect's API,
and the repository's prefect.yaml (one deployment per recurring topic) deployed to it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import REPO

pytestmark = pytest.mark.server
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A real Prefect server; yields the environment that points commands at it."""
    port = free_port()
    home = tmp_path_factory.mktemp("prefect-home")
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_UI_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    }
    log = (home / "server.log").open("w")
    process = subprocess.Popen(
        [BIN / "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 150
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prefect server did not start: {(home / 'server.log').read_text()[-2000:]}")
            time.sleep(1)
        yield env
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def api(env: dict[str, str], path: str, body: dict | None = None) -> list[dict]:
    response = httpx.post(f"{env['PREFECT_API_URL']}{path}", json=body or {}, timeout=30)
    response.raise_for_status()
    return response.json()


def test_a_cli_run_is_a_completed_flow_run_with_its_artifacts(server: dict[str, str], tmp_path: Path) -> None:
    db = tmp_path / "store.duckdb"
    citeflow = str(BIN / "citeflow")
    subprocess.run([citeflow, "ingest", "docs", "--db", str(db)], cwd=REPO, env=server, check=True)
    run = subprocess.run(
        [citeflow, "run", "Where does citeflow keep the search index?", "--db", str(db), "--reports",
         str(tmp_path), "--json"],
        cwd=REPO, env=server, capture_output=True, text=True, timeout=300,
    )  # fmt: skip

    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    flow_runs = api(server, "/flow_runs/filter", {"flow_runs": {"id": {"any_": [report["run_id"]]}}})
    assert [flow_run["state"]["type"] for flow_run in flow_runs] == ["COMPLETED"]
    task_runs = api(server, "/task_runs/filter", {"flow_runs": {"id": {"any_": [report["run_id"]]}}})
    assert {"plan", "research", "verify", "synthesise", "critique", "finish"} <= {
        task_run["name"].split("-")[0] for task_run in task_runs
    }
    artifacts = api(server, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [report["run_id"]]}}})
    by_key = {artifact["key"]: artifact for artifact in artifacts}
    slug = "where-does-citeflow-keep-the-search-index"
    assert by_key[f"report-{slug}"]["type"] == "markdown"
    assert by_key[f"report-{slug}"]["data"] == report["report"]
    assert by_key[f"sources-{slug}"]["type"] == "table"
    assert by_key[f"metrics-{slug}"]["type"] == "table"
    assert by_key[f"progress-{slug}"]["data"] == 100.0


def test_the_repository_prefect_yaml_deploys_one_deployment_per_topic(server: dict[str, str]) -> None:
    prefect = str(BIN / "prefect")
    subprocess.run([prefect, "work-pool", "create", "citeflow", "--type", "process"], env=server, check=True)
    deploy = subprocess.run(
        [prefect, "--no-prompt", "deploy", "--all"], cwd=REPO, env=server, capture_output=True, text=True
    )

    assert deploy.returncode == 0, deploy.stdout[-3000:] + deploy.stderr[-3000:]
    deployments = api(server, "/deployments/filter", {"deployments": {"tags": {"all_": ["citeflow"]}}})
    by_name = {deployment["name"]: deployment for deployment in deployments}
    assert set(by_name) == {"quote-verification", "local-search-index"}
    quotes = by_name["quote-verification"]
    assert quotes["entrypoint"] == "flows/research.py:research_flow"
    assert quotes["global_concurrency_limit"]["limit"] == 1  # a topic's runs never overlap
    assert quotes["parameters"]["question"] == "How does citeflow check that a quote appears on a page?"
    assert quotes["parameters"]["topic"] == "quote-verification"
    assert [schedule["schedule"]["cron"] for schedule in quotes["schedules"]] == ["30 6 * * *"]
