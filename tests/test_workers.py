"""Several workers, one Prefect server: model calls bounded across processes by a global concurrency limit
named after the endpoint, and a topic's stages cached by one `prefect worker` of a process work pool reused
by another through a shared S3 result storage block (moto on loopback), each with its own PREFECT_HOME."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai_server import Reply, ScriptedServer, role_of
from prefect_servers import prefect_server
from role_server import RoleServer
from worker_pool import (
    deploy,
    finished,
    logs_of,
    save_results_block,
    start_run,
    start_workers,
    stop_workers,
    task_states,
    worker_env,
    worker_of,
)

from citeflow.contracts import ClaimStatus
from citeflow.llm.client import limit_name

pytestmark = pytest.mark.server
TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def prefect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with prefect_server(tmp_path_factory.mktemp("prefect-server")) as env:
        yield env


def call_together(env: dict[str, str], url: str, folder: Path, *options: str) -> None:
    """Two processes, each with its own PREFECT_HOME, each making 3 calls at once with 2 slots of its own."""
    go = folder / "go"
    callers = []
    for n in range(2):
        home = folder / f"home-{n}"
        home.mkdir()
        ready = str(folder / f"ready-{n}")
        command = [sys.executable, str(TESTS / "endpoint_caller.py"), url, "2", "3", ready]
        callers.append(
            subprocess.Popen(
                [*command, str(go), *options], env={**env, "PREFECT_HOME": str(home)}, stderr=subprocess.PIPE
            )
        )
    deadline = time.monotonic() + 120
    while not all((folder / f"ready-{n}").exists() for n in range(2)) and time.monotonic() < deadline:
        time.sleep(0.1)
    go.touch()
    for caller in callers:
        _, err = caller.communicate(timeout=120)
        assert caller.returncode == 0, err.decode()[-3000:]


def test_calls_to_one_endpoint_are_bounded_across_processes(prefect: dict[str, str], tmp_path: Path) -> None:
    with ScriptedServer() as model:
        model.default = Reply(content="ok", delay=1.5)
        url = model.url.replace("127.0.0.1", "caller:secret@127.0.0.1")  # credentials never name a limit
        call_together(prefect, url, tmp_path)
        assert len(model.requests) == 6
        assert model.max_in_flight == 2

    name = limit_name(url)
    assert "secret" not in name and "caller" not in name
    response = httpx.get(f"{prefect['PREFECT_API_URL']}/v2/concurrency_limits/{name}", timeout=10)
    assert response.status_code == 200, response.text
    assert response.json()["limit"] == 2  # sized from the per-endpoint concurrency
    assert response.json()["active_slots"] == 0  # every slot given back


def test_without_the_shared_limit_each_process_bounds_itself(prefect: dict[str, str], tmp_path: Path) -> None:
    """The control: the same two processes bounded per process only send 4 calls at once."""
    with ScriptedServer() as model:
        model.default = Reply(content="ok", delay=1.5)
        call_together(prefect, model.url, tmp_path, "--local")
        assert len(model.requests) == 6
        assert model.max_in_flight == 4


def test_a_topic_run_on_another_worker_reuses_the_first_workers_stages(
    prefect: dict[str, str], tmp_path: Path
) -> None:
    pytest.importorskip("prefect_aws", reason="prefect-aws is missing: pip install citeflow[scale]")
    pytest.importorskip("moto", reason="moto[server] is missing: it is a test dependency")
    from conftest import REPO
    from lake_servers import s3_server

    bin_dir = Path(sys.executable).parent
    prefect_cli = str(bin_dir / "prefect")
    db = tmp_path / "store.duckdb"
    subprocess.run(
        [str(bin_dir / "citeflow"), "ingest", "docs", "--db", str(db)], cwd=REPO, env=prefect, check=True
    )
    deploy(prefect, REPO / "prefect.yaml")
    model_requests = []
    with s3_server("prefect-results") as s3, RoleServer() as model:
        save_results_block(prefect, s3.endpoint, s3.bucket)
        for worker in ("worker-a", "worker-b"):  # one after the other: the second run lands on worker-b
            home = tmp_path / worker
            home.mkdir()
            env = worker_env(prefect, home, model.url, {"CITEFLOW_DB": str(db)})
            before = len(model.requests)
            started = start_workers((worker,), {worker: env}, tmp_path)
            try:
                deployment_run = subprocess.run(
                    [prefect_cli, "deployment", "run", "citeflow-research/quote-verification", "--watch",
                     "--watch-timeout", "240"],
                    env=prefect, capture_output=True, text=True, timeout=300,
                )  # fmt: skip
            finally:
                stop_workers(started)
            worker_log = (tmp_path / f"{worker}.log").read_text()[-3000:]
            assert deployment_run.returncode == 0, deployment_run.stdout[-2000:] + worker_log
            assert not list(home.rglob("storage/*")), "a result was written under this worker's PREFECT_HOME"
            model_requests.append(len(model.requests) - before)
    assert model_requests[0] > 0 and model_requests[1] == 0, model_requests  # the repeat asked no model

    api_url = prefect["PREFECT_API_URL"]
    # The flow runs' model calls took slots of the limit named after the endpoint, sized for a local server.
    limit = httpx.get(f"{api_url}/v2/concurrency_limits/{limit_name(model.url)}", timeout=10)
    assert limit.status_code == 200 and limit.json()["limit"] == 1, limit.text
    flow_runs = httpx.post(
        f"{api_url}/flow_runs/filter",
        json={"flow_runs": {"tags": {"all_": ["topic:quote-verification"]}}, "sort": "START_TIME_ASC"},
        timeout=30,
    ).json()
    ran = [run for run in flow_runs if run["state"]["type"] != "SCHEDULED"]
    assert [run["state"]["type"] for run in ran] == ["COMPLETED", "COMPLETED"], [r["state"] for r in ran]
    states = []
    for run in ran:
        tasks = httpx.post(
            f"{api_url}/task_runs/filter", json={"flow_runs": {"id": {"any_": [run["id"]]}}}, timeout=30
        ).json()
        states.append(
            {task["name"]: task["state"]["name"] for task in tasks if not task["name"].startswith("finish")}
        )
    first, second = states
    assert {name.split("-")[0] for name in second} >= {"plan", "research", "verify", "synthesise"}
    assert set(second.values()) == {"Cached"}, second
    assert "Cached" not in first.values(), first


# Twelve recurring topics over citeflow's own documents, each a deployment of its own (runs of one topic
# never overlap; topics run side by side). The question goes with the run: the topics file in the
# repository holds only its own two topics.
TOPICS = {
    "quote-offsets": "How does citeflow check that a quote appears on a page?",
    "store-pages": "Where does the evidence store keep its pages and runs?",
    "lake-catalog": "What does a DuckLake catalog hold for a shared store?",
    "model-limits": "How are model calls to one endpoint bounded across workers?",
    "shared-cache": "How do several workers share cached stages?",
    "store-copy": "How is a store copied into a lake and back?",
    "bm25-search": "How does local search rank pages with BM25?",
    "stage-failures": "What happens to a run when one of its stages fails?",
    "critic-role": "What does the critic check in a drafted report?",
    "recurring-topics": "How are recurring research topics scheduled as deployments?",
    "partial-reports": "When is a report partial rather than complete?",
    "time-travel": "How can a reader see the lake as it was when a run finished?",
}
WORKERS = ("worker-1", "worker-2", "worker-3")
RUNS_PER_WORKER = 4  # `--limit`: no worker takes all twelve runs before the others poll
TABLES = ("pages", "runs", "claims", "report_sentences", "model_calls")


@pytest.mark.timeout(600)
def test_twelve_topic_runs_on_three_workers_share_one_lake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20, tested for real on loopback: 3 workers, one DuckLake (PostgreSQL catalog, data in S3),
    one result bucket, 12 topic runs triggered at once over the ingested docs; then a topic run again on
    another worker, answered from the cache."""
    pytest.importorskip("prefect_aws", reason="prefect-aws is missing: pip install citeflow[scale]")
    pytest.importorskip("moto", reason="moto[server] is missing: it is a test dependency")
    from conftest import REPO
    from lake_servers import postgres_bin, postgres_server, s3_server

    if postgres_bin() is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql; scripts/setup dev does it)")
    from citeflow.config import StoreSettings
    from deployments.topics import generated_prefect_yaml
    from flows.topics import Topic
    from storage.store import EvidenceStore, close_stores
    from tasks.audit import audit_run, claim_problem

    started = time.monotonic()
    bin_dir = Path(sys.executable).parent
    citeflow_cli = str(bin_dir / "citeflow")
    topics = [Topic(name=name, question=question, cron="0 0 1 1 *") for name, question in TOPICS.items()]
    prefect_yaml = tmp_path / "prefect.yaml"  # as `citeflow topics add` writes it, for these topics
    prefect_yaml.write_text(generated_prefect_yaml(topics))

    with postgres_server() as postgres, s3_server("citeflow") as s3, RoleServer() as model:
        postgres.create_database("workers")
        postgres.create_database("prefect")
        # The server on PostgreSQL, as for a team: on its default SQLite, twelve runs at once made it refuse
        # writes ("Service Unavailable") until a worker gave up submitting a run, which Prefect marks crashed.
        server_home = tmp_path / "prefect-server"
        server_home.mkdir()
        with prefect_server(server_home, database=postgres.sqlalchemy_url("prefect")) as prefect:
            api_url = prefect["PREFECT_API_URL"]
            location = postgres.location("workers")
            data_path = f"s3://{s3.bucket}/lake/"
            lake = {"CITEFLOW_DB": location, "CITEFLOW_STORE__DATA_PATH": data_path, **s3.env()}
            ingest = subprocess.run(
                [citeflow_cli, "ingest", "docs"],
                cwd=REPO,
                env={**prefect, **lake},
                capture_output=True,
                text=True,
            )
            assert ingest.returncode == 0, ingest.stderr[-3000:]
            ingested = int(re.search(r"(\d+) new", ingest.stdout).group(1))  # type: ignore[union-attr]
            assert ingested > 0, ingest.stdout
            deploy(prefect, prefect_yaml)
            save_results_block(prefect, s3.endpoint, s3.bucket)

            # Model slots sized as for a hosted endpoint: with the 1 slot of a server on this machine, twelve
            # runs' calls queued minutes for the limit on a busy Prefect server.
            slots = {"CITEFLOW_MODELS__MAX_CONCURRENT_PER_ENDPOINT": "16"}
            env_of = {}
            for name in WORKERS:
                (tmp_path / name).mkdir()
                env_of[name] = worker_env(prefect, tmp_path / name, model.url, {**lake, **slots})
            workers = start_workers(WORKERS, env_of, tmp_path, RUNS_PER_WORKER)
            try:
                # Twelve topic runs at once.
                triggered = time.monotonic()
                first_runs = {t.name: start_run(api_url, t.name, {"question": t.question}) for t in topics}
                runs = finished(api_url, list(first_runs.values()), 420, tmp_path)
                twelve_seconds = time.monotonic() - triggered
                calls_of_twelve = len(model.requests)

                by_id = {run["id"]: run for run in runs}
                states = {topic: by_id[run_id]["state"]["type"] for topic, run_id in first_runs.items()}
                assert set(states.values()) == {"COMPLETED"}, f"{states}\n{logs_of(tmp_path)}"
                ran_on = {topic: worker_of(by_id[run_id]) for topic, run_id in first_runs.items()}
                spread = Counter(ran_on.values())
                print(f"\n12 topic runs finished in {twelve_seconds:.1f} s, runs per worker: {dict(spread)}")
                assert set(spread) <= set(WORKERS) and len(spread) > 1, ran_on  # not one worker doing it all

                counts = sql_row(citeflow_cli, {**os.environ, **lake}, tmp_path, tables_sql())
                print("rows per table after the 12 runs:", counts, f"model requests: {calls_of_twelve}")
                assert counts["pages"] == counts["page_ids"] == ingested, counts  # each page once, none added
                assert counts["runs"] == len(TOPICS), counts
                assert counts["model_calls"] == calls_of_twelve, counts  # each call the server answered, once
                assert counts["claims"] == counts["claim_ids"], counts  # (run, claim id) once each

                # Every claim of every run against the lake, with the product's audit (`citeflow audit`).
                for name, value in lake.items():
                    monkeypatch.setenv(name, value)
                store = EvidenceStore.open(Path(location), settings=StoreSettings(data_path=data_path))
                try:
                    statuses = {run.run_id: run.status.value for run in store.recent_runs()}
                    assert set(statuses) == set(first_runs.values()), statuses
                    assert set(statuses.values()) <= {"complete", "partial"}, statuses
                    verified = 0
                    for run_id in first_runs.values():
                        audited = audit_run(store, run_id)
                        assert audited.sound, audited.model_dump()
                        claims = store.claims(run_id, ClaimStatus.verified)
                        assert claims, f"run {run_id} verified no claim"
                        problems = [claim_problem(c, store.get_page(c.page_id), latest=False) for c in claims]
                        assert not any(problems), [p for p in problems if p]
                        verified += len(claims)
                    print(f"audit: {verified} verified claims of {len(first_runs)} runs hold on the lake; "
                          f"run statuses {dict(Counter(statuses.values()))}")  # fmt: skip
                finally:
                    close_stores()

                # The same topic again on another worker: the worker that ran it is stopped first.
                topic = topics[0]
                first_worker = ran_on[topic.name]
                workers[first_worker].terminate()
                workers[first_worker].wait(timeout=30)
                before = len(model.requests)
                again_id = start_run(api_url, topic.name, {"question": topic.question})
                [again] = finished(api_url, [again_id], 240, tmp_path)
                repeat_calls = len(model.requests) - before
                print(f"repeat of {topic.name}: first on {first_worker}, again on {worker_of(again)}, "
                      f"{repeat_calls} model calls")  # fmt: skip
                assert again["state"]["type"] == "COMPLETED", again["state"]
                assert worker_of(again) not in {"", first_worker}, again.get("labels")
                assert repeat_calls == 0, [role_of(r) for r in model.requests[before:]]  # no model call
                stages = task_states(api_url, again["id"])
                assert {name.split("-")[0] for name in stages} >= {"plan", "research", "verify", "synthesise"}
                assert set(stages.values()) == {"Cached"}, stages
                assert "Cached" not in task_states(api_url, first_runs[topic.name]).values()
            finally:
                stop_workers(workers)
    print(f"wall time {time.monotonic() - started:.1f} s")


def tables_sql() -> str:
    counts = ", ".join(f"(SELECT count(*) FROM {table}) AS {table}" for table in TABLES)
    return (
        f"SELECT {counts}, (SELECT count(DISTINCT id) FROM pages) AS page_ids, "
        "(SELECT count(DISTINCT (run_id, id)) FROM claims) AS claim_ids"
    )


def sql_row(citeflow_cli: str, env: dict[str, str], cwd: Path, statement: str) -> dict[str, int]:
    done = subprocess.run(
        [citeflow_cli, "sql", "--json", statement],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [row] = [json.loads(line) for line in done.stdout.splitlines()]
    return row
