"""`prefect server start` on a loopback port: a run from the command line, checked through Prefect's API,
and the repository's prefect.yaml (one deployment per recurring topic) deployed to it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import REPO
from prefect_servers import prefect_server

pytestmark = pytest.mark.server
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A real Prefect server; yields the environment that points commands at it."""
    with prefect_server(tmp_path_factory.mktemp("prefect-home")) as env:
        yield env


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
    assert "question" not in quotes["parameters"]  # read from topics.yaml by the run, never templated
    assert quotes["parameters"]["topic"] == "quote-verification"
    assert [schedule["schedule"]["cron"] for schedule in quotes["schedules"]] == ["30 6 * * *"]


# A question that names an environment variable, a Prefect variable, a Prefect secret block and a Jinja tag:
# Prefect's deploy templating would replace the first three with their values.
TEMPLATED = (
    "Who wrote {{ $OPENAI_API_KEY }}, {{ prefect.variables.planted_var }}, "
    "{{ prefect.blocks.secret.planted-block }} and {% if true %}this{% endif %}?"
)
PLANTED = ("sk-planted-env-2741", "planted-variable-5902", "planted-block-8813")


def test_a_topic_question_reaches_the_deployment_and_the_run_as_literal_text(
    server: dict[str, str], tmp_path: Path
) -> None:
    from role_server import PAGES

    env = {**server, "OPENAI_API_KEY": PLANTED[0]}
    project = tmp_path / "project"
    (project / "deployments").mkdir(parents=True)
    (project / "flows").symlink_to(REPO / "flows")
    citeflow, prefect = str(BIN / "citeflow"), str(BIN / "prefect")
    variable = [prefect, "variable", "set", "planted_var", PLANTED[1], "--overwrite"]
    subprocess.run(variable, env=env, check=True)
    secret = f"Secret(value={PLANTED[2]!r}).save('planted-block')"
    save_block = f"from prefect.blocks.system import Secret; {secret}"
    subprocess.run([sys.executable, "-c", save_block], env=env, check=True)
    subprocess.run([prefect, "work-pool", "create", "citeflow", "--type", "process"], env=env)
    # A reference to a block that does not exist comes first: it must not stop the topics after it.
    missing = "What is {{ prefect.blocks.secret.nowhere }}?"
    for name, question in (("missing", missing), ("tricky", TEMPLATED)):
        subprocess.run([citeflow, "topics", "add", name, "--question", question, "--cron", "0 6 * * 1"],
                       cwd=project, env=env, check=True)  # fmt: skip
    deploy = subprocess.run([prefect, "--no-prompt", "deploy", "--all"], cwd=project, env=env,
                            capture_output=True, text=True)  # fmt: skip
    assert deploy.returncode == 0, deploy.stdout[-3000:] + deploy.stderr[-3000:]
    deployments = api(env, "/deployments/filter", {"deployments": {"tags": {"all_": ["citeflow"]}}})
    by_name = {deployment["name"]: deployment for deployment in deployments}
    assert {"missing", "tricky"} <= set(by_name)

    # The worker calls the flow with the deployment's parameters, in the project folder.
    db = tmp_path / "store.duckdb"
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(page) + "\n" for page in PAGES), encoding="utf-8")
    subprocess.run([citeflow, "ingest", str(corpus), "--db", str(db)], env=env, check=True)
    parameters = by_name["tricky"]["parameters"]
    parameters["settings"] = {**parameters["settings"], "db": str(db), "reports": str(tmp_path / "reports")}
    run = f"from flows.research import research_flow; research_flow(**{parameters!r})"
    done = subprocess.run([sys.executable, "-c", run], cwd=project, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    # Nothing in the corpus answers it: the run fails, as a NoReport, with no error from Prefect's engine.
    assert done.returncode == 1 and "NoReport: No report" in done.stderr, done.stderr[-3000:]
    assert "Unexpected result for failed state" not in done.stderr

    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        [(stored,)] = con.execute("SELECT question FROM runs").fetchall()
    assert stored == TEMPLATED
    flow_runs = [run for run in api(env, "/flow_runs/filter") if run["parameters"].get("topic") == "tricky"]
    # The server's scheduler adds the topic's next cron runs beside the one run here.
    states = sorted(run["state"]["type"] for run in flow_runs)
    assert states[0] == "FAILED" and set(states[1:]) <= {"SCHEDULED"}
    seen = json.dumps([deployments, flow_runs, api(env, "/artifacts/filter")]) + deploy.stdout + done.stderr
    assert not [secret for secret in PLANTED if secret in seen]

    # Removing a topic also deletes its deployment and schedule from the server that has them.
    removed = subprocess.run([citeflow, "topics", "remove", "missing", "--db", str(db)], cwd=project, env=env,
                             capture_output=True, text=True)  # fmt: skip
    assert removed.returncode == 0, removed.stderr
    assert "deployment citeflow-research/missing" in removed.stdout
    assert api(env, "/deployments/filter", {"deployments": {"name": {"any_": ["missing"]}}}) == []


def test_credentials_in_a_base_url_reach_no_row_artifact_parameter_log_or_output(
    server: dict[str, str], tmp_path: Path
) -> None:
    import duckdb
    from openai_server import Reply, ScriptedServer

    secret = "sk-planted-userinfo-3141"
    db = tmp_path / "store.duckdb"
    citeflow = str(BIN / "citeflow")
    subprocess.run([citeflow, "ingest", "docs", "--db", str(db)], cwd=REPO, env=server, check=True)
    with ScriptedServer() as model:
        model.default = Reply(content="not what any role asked for")  # each role falls back: still a run
        url = model.url.replace("http://", f"http://alice:{secret}@")
        given = ["--db", str(db), "--base-url", url, "--model", "scripted-model"]
        question = "Where does citeflow keep the search index?"
        run = subprocess.run(
            [citeflow, "run", question, *given, "--reports", str(tmp_path), "--json"],
            cwd=REPO, env=server, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        shown = subprocess.run([citeflow, "config", "show", *given], cwd=REPO, env=server,
                               capture_output=True, text=True, timeout=120)  # fmt: skip

    assert run.returncode == 0, run.stderr[-3000:]
    assert model.requests, "the run reached the endpoint it was given, credentials and all"
    assert shown.returncode == 0 and "http://***@127.0.0.1" in shown.stdout, shown.stderr
    run_id = json.loads(run.stdout)["run_id"]
    with duckdb.connect(str(db), read_only=True) as con:
        tables = con.execute("SELECT table_schema, table_name FROM information_schema.tables").fetchall()
        stored = [str(con.execute(f'SELECT * FROM "{s}"."{t}"').fetchall()) for s, t in tables]
        [(settings,)] = con.execute("SELECT settings FROM runs WHERE run_id = ?", [run_id]).fetchall()
    assert "http://***@127.0.0.1" in settings
    of_run = {"flow_runs": {"id": {"any_": [run_id]}}}
    prefect = [
        api(server, "/flow_runs/filter", of_run),
        api(server, "/task_runs/filter", of_run),
        api(server, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run_id]}}}),
        api(server, "/logs/filter", {"logs": {"flow_run_id": {"any_": [run_id]}}}),
    ]
    reports = [path.read_text(encoding="utf-8") for path in tmp_path.glob("*.md")]
    everything = [run.stdout, run.stderr, shown.stdout, shown.stderr, *stored, json.dumps(prefect), *reports]
    assert all(prefect) and [text for text in everything if secret in text] == []
