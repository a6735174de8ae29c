"""Several workers, one Prefect server: model calls bounded across processes by a global concurrency limit
named after the endpoint, and a topic's stages cached by one `prefect worker` of a process work pool reused
by another through a shared S3 result storage block (moto on loopback), each with its own PREFECT_HOME."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai_server import Reply, ScriptedServer
from prefect_servers import prefect_server
from role_server import RoleServer

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


RESULTS_BLOCK = """
import sys
from prefect_aws import AwsClientParameters, AwsCredentials, S3Bucket

credentials = AwsCredentials(
    aws_access_key_id="testing",
    aws_secret_access_key="testing",
    region_name="us-east-1",
    aws_client_parameters=AwsClientParameters(endpoint_url=sys.argv[1]),
)
credentials.save("citeflow-moto", overwrite=True)
S3Bucket(bucket_name=sys.argv[2], credentials=credentials, bucket_folder="results").save(
    "citeflow-results", overwrite=True
)
"""


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
    subprocess.run(
        [prefect_cli, "work-pool", "create", "citeflow", "--type", "process"], env=prefect, check=True
    )
    subprocess.run([prefect_cli, "--no-prompt", "deploy", "--all"], cwd=REPO, env=prefect, check=True,
                   capture_output=True)  # fmt: skip
    model_requests = []
    with s3_server("prefect-results") as s3, RoleServer() as model:
        subprocess.run([sys.executable, "-c", RESULTS_BLOCK, s3.endpoint, s3.bucket], env=prefect, check=True)
        for worker in ("worker-a", "worker-b"):  # one after the other: the second run lands on worker-b
            home = tmp_path / worker
            home.mkdir()
            env = {
                **prefect,
                "PREFECT_HOME": str(home),
                "PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK": "s3-bucket/citeflow-results",
                "PREFECT_WORKER_QUERY_SECONDS": "1",
                "CITEFLOW_DB": str(db),
                "CITEFLOW_REPORTS": str(home / "reports"),
                "OPENAI_BASE_URL": model.url,
                "CITEFLOW_MODEL": "test-model",
                "OPENAI_API_KEY": "sk-worker-test",
            }
            before = len(model.requests)
            log = (tmp_path / f"{worker}.log").open("w")
            process = subprocess.Popen(
                [prefect_cli, "worker", "start", "--pool", "citeflow", "--name", worker],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            try:
                deployment_run = subprocess.run(
                    [prefect_cli, "deployment", "run", "citeflow-research/quote-verification", "--watch",
                     "--watch-timeout", "240"],
                    env=prefect, capture_output=True, text=True, timeout=300,
                )  # fmt: skip
            finally:
                process.terminate()
                process.wait(timeout=30)
                log.close()
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
