"""Several workers, one Prefect server: model calls bounded across processes by a global concurrency limit
named after the endpoint, and stages cached by one process reused by another through a shared S3 result
storage block (moto on loopback), each process with its own PREFECT_HOME."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai_server import Reply, ScriptedServer
from prefect_servers import prefect_server

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


def test_a_stage_cached_by_one_process_is_a_cache_hit_in_another(
    prefect: dict[str, str], tmp_path: Path
) -> None:
    pytest.importorskip("prefect_aws", reason="prefect-aws is missing: pip install citeflow[scale]")
    pytest.importorskip("moto", reason="moto[server] is missing: it is a test dependency")
    from conftest import REPO
    from lake_servers import s3_server

    citeflow = str(Path(sys.executable).parent / "citeflow")
    db = tmp_path / "store.duckdb"
    subprocess.run([citeflow, "ingest", "docs", "--db", str(db)], cwd=REPO, env=prefect, check=True)
    with s3_server("prefect-results") as s3:
        subprocess.run([sys.executable, "-c", RESULTS_BLOCK, s3.endpoint, s3.bucket], env=prefect, check=True)
        runs = []
        for worker in ("worker-a", "worker-b"):
            home = tmp_path / worker
            home.mkdir()
            env = {
                **prefect,
                "PREFECT_HOME": str(home),
                "PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK": "s3-bucket/citeflow-results",
            }
            run = subprocess.run(
                [citeflow, "run", "Where does citeflow keep the search index?", "--db", str(db), "--reports",
                 str(tmp_path / worker), "--json"],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert run.returncode == 0, run.stderr[-3000:]
            runs.append(json.loads(run.stdout)["run_id"])
            assert not list(home.rglob("storage/*")), "a result was written under this process's PREFECT_HOME"

        import boto3

        aws = s3.env()
        bucket = boto3.client(
            "s3",
            endpoint_url=s3.endpoint,
            aws_access_key_id=aws["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=aws["AWS_SECRET_ACCESS_KEY"],
            region_name=aws["AWS_REGION"],
        )
        objects = bucket.list_objects_v2(Bucket=s3.bucket, Prefix="results/")
        assert objects.get("KeyCount", 0) > 0  # the results went to the shared bucket

    states = {}
    for run_id in runs:
        response = httpx.post(
            f"{prefect['PREFECT_API_URL']}/task_runs/filter",
            json={"flow_runs": {"id": {"any_": [run_id]}}},
            timeout=30,
        )
        response.raise_for_status()
        states[run_id] = {task["name"]: task["state"]["name"] for task in response.json()}
    first, second = (states[run_id] for run_id in runs)
    cached_stages = {name: state for name, state in second.items() if not name.startswith("finish")}
    assert {name.split("-")[0] for name in cached_stages} >= {"plan", "research", "verify", "synthesise"}
    assert set(cached_stages.values()) == {"Cached"}, second
    assert "Cached" not in first.values(), first
