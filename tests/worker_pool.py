"""A process work pool on a real Prefect server, for the workers test and the workers benchmark: topic
deployments, `prefect worker` processes each with its own PREFECT_HOME and the shared S3 result block,
runs started through the API as `prefect deployment run` starts them, and their end awaited."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from lake_servers import BIN

REPO = Path(__file__).resolve().parent.parent
FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}

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


def save_results_block(prefect: dict[str, str], endpoint: str, bucket: str) -> None:
    """The S3 result storage block `s3-bucket/citeflow-results` every worker's runs cache their stages in."""
    subprocess.run([sys.executable, "-c", RESULTS_BLOCK, endpoint, bucket], env=prefect, check=True)


def worker_env(prefect: dict[str, str], home: Path, model_url: str, store: dict[str, str]) -> dict[str, str]:
    """A `prefect worker`'s environment: its own PREFECT_HOME, the shared S3 result block, the model, and
    `store` (where the evidence store is, and any setting of its own)."""
    return {
        **prefect,
        **store,
        "PREFECT_HOME": str(home),
        "PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK": "s3-bucket/citeflow-results",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "CITEFLOW_REPORTS": str(home / "reports"),
        "OPENAI_BASE_URL": model_url,
        "CITEFLOW_MODEL": "test-model",
        "OPENAI_API_KEY": "sk-worker-test",
    }


def deploy(prefect: dict[str, str], prefect_yaml: Path) -> None:
    """The process work pool `citeflow` and the deployments of `prefect_yaml` (as `citeflow topics` writes
    it), as a team creates them."""
    pool = [str(BIN / "prefect"), "work-pool", "create", "citeflow", "--type", "process", "--overwrite"]
    subprocess.run(pool, env=prefect, check=True, capture_output=True)
    deployed = subprocess.run(
        [str(BIN / "prefect"), "--no-prompt", "deploy", "--all", "--prefect-file", str(prefect_yaml)],
        cwd=REPO, env=prefect, capture_output=True, text=True,
    )  # fmt: skip
    if deployed.returncode != 0:
        raise RuntimeError(f"prefect deploy failed: {deployed.stdout[-3000:]}{deployed.stderr[-3000:]}")


def api(method: str, url: str, body: dict | None = None) -> Any:
    """One call to the Prefect API, tried again on 503 and 429 as Prefect's own client does."""
    for attempt in range(8):
        response = httpx.request(method, url, json=body, timeout=30)
        if response.status_code not in {429, 503}:
            break
        time.sleep(0.5 * 2**attempt)
    response.raise_for_status()
    return response.json()


def start_workers(
    names: tuple[str, ...], env_of: dict[str, dict[str, str]], logs: Path, limit: int | None = None
) -> dict[str, subprocess.Popen]:
    """`citeflow worker` for each name, each taking at most `limit` runs at once (no limit: as many
    as come), logging to LOGS/NAME.log; returns once the server lists every one of them online."""
    workers: dict[str, subprocess.Popen] = {}
    limited = ["--limit", str(limit)] if limit is not None else []
    for name in names:
        with (logs / f"{name}.log").open("w") as log:
            workers[name] = subprocess.Popen(
                [str(BIN / "citeflow"), "worker", "--pool", "citeflow", "--name", name, *limited],
                cwd=REPO, env=env_of[name], stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
    api_url = next(iter(env_of.values()))["PREFECT_API_URL"]
    deadline = time.monotonic() + 120
    while online_workers(api_url) < set(names):
        if time.monotonic() > deadline or any(w.poll() is not None for w in workers.values()):
            stop_workers(workers)
            raise RuntimeError(f"workers not online: {logs_of(logs)}")
        time.sleep(1)
    return workers


def stop_workers(workers: dict[str, subprocess.Popen]) -> None:
    for process in workers.values():
        process.terminate()
    for process in workers.values():
        process.wait(timeout=30)


def online_workers(api_url: str) -> set[str]:
    workers = api("POST", f"{api_url}/work_pools/citeflow/workers/filter", {})
    return {worker["name"] for worker in workers if worker.get("status") == "ONLINE"}


def start_run(api_url: str, topic: str, parameters: dict[str, Any]) -> str:
    """A run of the topic's deployment, created through the API as `prefect deployment run` does."""
    deployment = api("GET", f"{api_url}/deployments/name/citeflow-research/{topic}")
    created = api(
        "POST", f"{api_url}/deployments/{deployment['id']}/create_flow_run", {"parameters": parameters}
    )
    return created["id"]


def flow_runs(api_url: str, ids: list[str]) -> list[dict]:
    return api("POST", f"{api_url}/flow_runs/filter", {"flow_runs": {"id": {"any_": ids}}})


def finished(api_url: str, ids: list[str], seconds: float, logs: Path) -> list[dict]:
    """The flow runs once each is in a final state; raises TimeoutError, with the workers' logs, after
    `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        runs = flow_runs(api_url, ids)
        if len(runs) == len(ids) and all(run["state"]["type"] in FINAL for run in runs):
            return runs
        if time.monotonic() > deadline:
            states = [(run["name"], run["state"]["type"], worker_of(run)) for run in runs]
            raise TimeoutError(f"flow runs not finished after {seconds} s: {states}\n{logs_of(logs)}")
        time.sleep(2)


def task_states(api_url: str, flow_run_id: str) -> dict[str, str]:
    """Each task run of a flow run but the finish step (which always runs): its name and state name."""
    tasks = api("POST", f"{api_url}/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}})
    return {task["name"]: task["state"]["name"] for task in tasks if not task["name"].startswith("finish")}


def worker_of(run: dict) -> str:
    return run.get("labels", {}).get("prefect.worker.name", "")


def logs_of(folder: Path) -> str:
    return "\n".join(f"--- {log.name}\n{log.read_text()[-2500:]}" for log in sorted(folder.glob("*.log")))
