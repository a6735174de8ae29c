"""The whole loop of a recurring topic, as the README shows it: `citeflow server start`, add a topic,
deploy it to a process work pool, run it now through its deployment with a worker, edit one page of the
corpus, run it again, and read the two flow runs, their artifacts and the "What changed" section through
Prefect's API. Then the other way to run topics, `python -m deployments.serve` with no work pool: refused
while a work pool owns the topic, and running it once the work-pool deployment is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import REPO
from role_server import PAGES, QUESTION

from cli.server import free_port

pytestmark = pytest.mark.server
BIN = Path(sys.executable).parent


def command(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]} {done.stderr[-3000:]}"
    return done


def ingest(project: Path, pages: list[dict[str, str]], env: dict[str, str]) -> None:
    corpus = project / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(page) + "\n" for page in pages), encoding="utf-8")
    command(str(BIN / "citeflow"), "ingest", str(corpus), cwd=project, env=env)


def api(url: str, path: str, body: dict) -> list[dict]:
    response = httpx.post(f"{url}{path}", json=body, timeout=30)
    response.raise_for_status()
    return response.json()


def finished_runs(url: str, deployment_id: str, count: int) -> list[dict]:
    """The deployment's flow runs once `count` of them are in a final state (oldest first)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        runs = api(
            url,
            "/flow_runs/filter",
            {"deployments": {"id": {"any_": [deployment_id]}}, "sort": "START_TIME_ASC"},
        )
        final = [
            run for run in runs if run["state"]["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
        ]
        if len(final) >= count:
            return final
        time.sleep(1)
    pytest.fail(f"the worker did not finish {count} run(s): {[r['state']['type'] for r in runs]}")


def wait_for_deployment(url: str, name: str) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = api(url, "/deployments/filter", {"deployments": {"name": {"any_": [name]}}})
        if found:
            return found[0]
        time.sleep(1)
    pytest.fail(f"deployment {name} was never served")


def test_a_topic_runs_through_its_deployment_and_its_second_run_says_what_changed(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "deployments").mkdir(parents=True)
    (project / "flows").symlink_to(REPO / "flows")  # the entrypoint prefect.yaml names
    env = {name: value for name, value in os.environ.items() if name != "PREFECT_API_URL"}
    port = free_port()
    citeflow = str(BIN / "citeflow")
    ingest(project, PAGES, env)
    command(citeflow, "server", "start", "--port", str(port), cwd=project, env=env)
    url = f"http://127.0.0.1:{port}/api"
    env = {**env, "PREFECT_API_URL": url, "PREFECT_WORKER_QUERY_SECONDS": "1"}
    worker = server_process = None
    serve = [sys.executable, "-m", "deployments.serve"]
    try:
        command(
            citeflow,
            "topics",
            "add",
            "acme",
            "--question",
            QUESTION,
            "--cron",
            "0 6 * * 1",
            cwd=project,
            env=env,
        )
        command(
            str(BIN / "prefect"), "work-pool", "create", "citeflow", "--type", "process", cwd=project, env=env
        )
        command(str(BIN / "prefect"), "--no-prompt", "deploy", "--all", cwd=project, env=env)
        [deployment] = api(url, "/deployments/filter", {"deployments": {"name": {"any_": ["acme"]}}})
        assert deployment["parameters"]["topic"] == "acme" and deployment["work_pool_name"] == "citeflow"
        worker = subprocess.Popen(
            [str(BIN / "citeflow"), "worker", "--pool", "citeflow"],
            cwd=project,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # the worker and the flow runs it starts are stopped together
        )

        queued = command(citeflow, "topics", "run", "acme", cwd=project, env=env)
        assert "queued run" in queued.stdout
        finished_runs(url, deployment["id"], 1)
        edited = PAGES[0]["text"].replace("founded by Jane Doe", "founded by Jane Doe and John Roe")
        ingest(project, [{**PAGES[0], "text": edited}, PAGES[1]], env)
        command(str(BIN / "prefect"), "deployment", "run", "citeflow-research/acme", cwd=project, env=env)
        runs = finished_runs(url, deployment["id"], 2)
        first_id, second_id = runs[0]["id"], runs[1]["id"]
        found = api(url, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [second_id]}}})

        # Serving the same topic with no work pool would run it twice: refused, saying how to switch.
        refused = subprocess.run(serve, cwd=project, env=env, capture_output=True, text=True, timeout=120)
        stop(worker)
        worker = None
        command(str(BIN / "prefect"), "deployment", "delete", "citeflow-research/acme", cwd=project, env=env)
        server_process = subprocess.Popen(serve, cwd=project, env=env, start_new_session=True,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        served = wait_for_deployment(url, "acme")
        command(str(BIN / "prefect"), "deployment", "run", "citeflow-research/acme", cwd=project, env=env)
        [by_serve] = finished_runs(url, served["id"], 1)
    finally:
        for process in (worker, server_process):
            if process is not None:
                stop(process)
        command(citeflow, "server", "stop", cwd=project, env=env)

    assert refused.returncode == 1 and "topic acme: is deployed to work pool citeflow" in refused.stderr
    assert served["work_pool_name"] is None and served["parameters"]["topic"] == "acme"
    assert by_serve["state"]["type"] == "COMPLETED"

    assert [run["state"]["type"] for run in runs] == ["COMPLETED", "COMPLETED"], runs
    assert all(run["name"].startswith("acme-") and "topic:acme" in run["tags"] for run in runs)
    artifacts = {artifact["key"]: artifact for artifact in found}
    assert {"report-acme", "changes-acme", "metrics-acme", "progress-acme"} <= set(artifacts)
    report = artifacts["report-acme"]["data"]
    assert "## What changed since the last run" in report and f"run {first_id[:8]})" in report
    assert "Changed source (its page differs): Acme Corp history" in report
    rows = artifacts["changes-acme"]["data"]
    rows = json.loads(rows) if isinstance(rows, str) else rows
    assert {
        "change": "changed source",
        "what": "https://example.org/acme-history",
        "detail": "Acme Corp history",
    } in rows


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a process group: SIGTERM, then SIGKILL if it has not ended in 30 s (a Prefect worker on a
    loaded machine once took over 90 s to wind down)."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
