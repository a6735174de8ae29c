"""Recurring topics: the topics file, prefect.yaml generated from it, the commands that change them (bad input
changes nothing), a deployment per topic, and what a topic's run says changed since its last one."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from role_server import PAGES, QUESTION
from typer.testing import CliRunner

from citeflow.contracts import Report
from cli.main import app
from deployments.serve import runner_deployments
from deployments.topics import generated_prefect_yaml
from flows.topics import load_topics
from storage.ingest import ingest_paths
from storage.store import get_store

runner = CliRunner()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder laid out as the repository is where topics are concerned, as the working folder."""
    (tmp_path / "deployments").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def add(*args: str) -> Any:
    return runner.invoke(app, ["topics", "add", *args])


def test_the_repository_prefect_yaml_is_generated_from_its_topics() -> None:
    topics = load_topics(REPO / "deployments" / "topics.yaml")
    assert topics, "the repository ships example topics"
    assert (REPO / "prefect.yaml").read_text(encoding="utf-8") == generated_prefect_yaml(topics)


def test_add_list_remove_keep_both_files_in_step(project: Path) -> None:
    result = add("acme", "--question", QUESTION, "--cron", "0 6 * * 1", "--timezone", "Europe/Paris",
                 "--search", "wikipedia, local", "--budget", "50000")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "added acme: next run" in result.stdout and "CET" in result.stdout or "CEST" in result.stdout
    [topic] = load_topics(project / "deployments" / "topics.yaml")
    assert (topic.search, topic.budget, topic.timezone) == ("wikipedia,local", 50000, "Europe/Paris")
    assert (project / "prefect.yaml").read_text(encoding="utf-8") == generated_prefect_yaml([topic])

    listed = runner.invoke(app, ["topics", "list", "--db", str(project / "store.duckdb")])
    assert listed.exit_code == 0 and listed.stdout.startswith(
        "acme  0 6 * * 1 (Europe/Paris)  last: never run"
    )

    assert runner.invoke(app, ["topics", "remove", "acme"]).exit_code == 0
    assert load_topics(project / "deployments" / "topics.yaml") == []
    assert "deployments: []" in (project / "prefect.yaml").read_text(encoding="utf-8")


DAILY = ["--question", QUESTION, "--cron", "0 6 * * *"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["acme", "--question", "Other?", "--cron", "0 7 * * *"], "topic acme: already exists"),
        (["Bad_Name", *DAILY], "name: 'Bad_Name' is not a slug"),
        (["other", "--question", QUESTION, "--cron", "0 25 * * *"], "schedule: '0 25 * * *' in zone UTC"),
        (["other", *DAILY, "--timezone", "Mars/Olympus"], "Invalid timezone"),
        (["other", *DAILY, "--search", "local,bing"], "unknown search provider 'bing'"),
        (["other", "--question", "  ", "--cron", "0 6 * * *"], "question: the question is empty"),
        (["other", *DAILY, "--notify", "no-slash"], "is not a notification block"),
    ],
)
def test_bad_input_is_one_line_and_changes_neither_file(project: Path, args: list[str], message: str) -> None:
    assert add("acme", "--question", QUESTION, "--cron", "0 6 * * 1").exit_code == 0
    before = [(project / name).read_bytes() for name in ("deployments/topics.yaml", "prefect.yaml")]

    result = add(*args)

    assert result.exit_code == 1
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert [(project / name).read_bytes() for name in ("deployments/topics.yaml", "prefect.yaml")] == before


def test_each_topic_is_a_deployment_named_after_it_that_needs_no_parameters(project: Path) -> None:
    assert (
        add(
            "acme", "--question", QUESTION, "--cron", "0 6 * * 1", "--notify", "custom-webhook/team"
        ).exit_code
        == 0
    )
    assert add("tea", "--question", "Which tea is green?", "--cron", "0 7 * * *").exit_code == 0

    deployments = runner_deployments(load_topics(project / "deployments" / "topics.yaml"))

    assert [d.name for d in deployments] == ["acme", "tea"]
    acme = deployments[0]
    expected = {"topic": "acme", "settings": {"search": "local"}}
    assert acme.parameters == {**expected, "notify": "custom-webhook/team"}
    assert acme.tags == ["citeflow", "topic:acme"] and acme.concurrency_limit == 1
    assert [schedule.schedule.cron for schedule in acme.schedules or []] == ["0 6 * * 1"]  # type: ignore[union-attr]


class Receiver:
    """A webhook receiver on 127.0.0.1 that keeps every JSON body posted to it."""

    def __init__(self) -> None:
        received: list[dict[str, Any]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.server.shutdown()


def ingest(db: Path, pages: list[dict[str, str]]) -> None:
    corpus = db.parent / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(page) + "\n" for page in pages), encoding="utf-8")
    ingest_paths(get_store(db), [corpus])


async def artifacts(key: str) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async with get_client() as client:
        return await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))


def test_a_topic_run_says_what_changed_since_its_last_and_tells_the_block(
    prefect_api: None, tmp_path: Path, receiver: Receiver
) -> None:
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    from flows.research import research_flow

    CustomWebhookNotificationBlock(
        name="acme-team", url=receiver.url, json_data={"subject": "{{subject}}", "body": "{{body}}"},
        allow_private_urls=True,
    ).save("acme-team", overwrite=True)  # fmt: skip
    db = tmp_path / "acme.duckdb"
    ingest(db, PAGES)
    settings = {"db": str(db), "reports": str(tmp_path / "reports")}

    def run() -> Report:
        report = research_flow(
            question=QUESTION, topic="acme", settings=settings, notify="custom-webhook/acme-team"
        )
        assert isinstance(report, Report)
        return report

    first = run()
    edited = PAGES[0]["text"].replace("founded by Jane Doe", "founded by Jane Doe and John Roe")
    ingest(db, [{**PAGES[0], "text": edited}, PAGES[1]])
    second = run()

    assert "## What changed: first run" in first.markdown
    section = second.markdown.split("## What changed since the last run (", 1)[1].split("\n## ", 1)[0]
    assert f"run {first.run_id[:8]})" in section
    assert (
        "- Changed source (its page differs): Acme Corp history (https://example.org/acme-history)" in section
    )
    assert "John Roe" in section  # a new claim, quoted from the changed page
    assert "Jane Doe in 1947" in section.split("no longer supported", 1)[1]  # the old wording of that claim
    [changes] = [
        a
        for a in asyncio.run(artifacts("changes-acme"))
        if a.flow_run_id and str(a.flow_run_id) == second.run_id
    ]
    rows = json.loads(changes.data) if isinstance(changes.data, str) else changes.data
    assert {
        "change": "changed source",
        "what": "https://example.org/acme-history",
        "detail": "Acme Corp history",
    } in rows
    reports = asyncio.run(artifacts("report-acme"))
    assert {r.data for r in reports} == {first.markdown, second.markdown}
    # Only the run that found changes was told of, with the report's first lines and where to read it.
    [message] = receiver.received
    assert message["subject"] == "citeflow topic acme: changes found"
    assert message["body"].startswith(f"# {QUESTION}") and "Open the run: " in message["body"]

    diff = runner.invoke(app, ["topics", "diff", "acme", "--db", str(db)])
    assert diff.exit_code == 0 and "- Changed source (its page differs): Acme Corp history" in diff.stdout


COMMENTED = """# Our team's topics: ask Ana before changing the schedules.
topics:
# the weekly one
- name: acme  # keep this name: dashboards use it
  question: Who founded Acme Corp?
  cron: 0 6 * * 1
"""


def test_comments_survive_add_remove_and_sync(project: Path) -> None:
    topics_file = project / "deployments" / "topics.yaml"
    topics_file.write_text(COMMENTED, encoding="utf-8")

    assert runner.invoke(app, ["topics", "sync"]).exit_code == 0
    assert topics_file.read_text(encoding="utf-8") == COMMENTED
    assert add("tea", "--question", "Which tea is green?", "--cron", "0 7 * * *").exit_code == 0
    assert runner.invoke(app, ["topics", "remove", "tea"]).exit_code == 0

    assert topics_file.read_text(encoding="utf-8") == COMMENTED


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("topic:\n- name: acme\n", "line 1: unknown key 'topic'; the file holds one key, `topics:`"),
        ("topics: 5\n", "line 1: `topics:` must be a list of topics, not 5"),
        ("topics:\n", "line 1: `topics:` must be a list of topics, not nothing"),
        ("topics:\n- name: a\n  name: b\n", "line 3: is not valid YAML"),
        (COMMENTED + "  quesiton: typo?\n", "line 7: unknown key 'quesiton'"),
        (COMMENTED + "  timezone: Mars/Olympus\n", "line 4:"),
        (COMMENTED + COMMENTED.split("topics:\n", 1)[1], "line 8: names topic acme a second time"),
        ("topics: [\n", "is not valid YAML"),
    ],
)
def test_a_file_that_does_not_validate_is_refused_with_its_line_and_left_as_it_was(
    project: Path, text: str, message: str
) -> None:
    topics_file = project / "deployments" / "topics.yaml"
    topics_file.write_text(text, encoding="utf-8")

    for command in (["topics", "sync"], ["topics", "add", "tea", "--question", "Q?", "--cron", "0 7 * * *"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 1 and result.exception is None or isinstance(result.exception, SystemExit)
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert topics_file.read_text(encoding="utf-8") == text
        assert not (project / "prefect.yaml").exists()


def test_a_latin_1_file_is_refused_with_its_line(project: Path) -> None:
    topics_file = project / "deployments" / "topics.yaml"
    topics_file.write_bytes(COMMENTED.replace("Acme Corp", "Acme Caf\u00e9").encode("latin-1"))

    result = runner.invoke(app, ["topics", "sync"])

    assert result.exit_code == 1 and "line 5: is not UTF-8 text" in result.stderr, result.stderr


def test_six_concurrent_adds_all_remain(project: Path) -> None:
    import subprocess
    import sys

    citeflow = str(Path(sys.executable).parent / "citeflow")
    names = [f"topic-{n}" for n in range(6)]
    started = [
        subprocess.Popen([citeflow, "topics", "add", name, "--question", f"What is {name}?", "--cron",
                          "0 6 * * *"], cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for name in names
    ]  # fmt: skip
    assert [process.wait(timeout=120) for process in started] == [0] * 6

    assert sorted(topic.name for topic in load_topics(project / "deployments" / "topics.yaml")) == names
    assert (project / "prefect.yaml").read_text(encoding="utf-8") == generated_prefect_yaml(
        load_topics(project / "deployments" / "topics.yaml")
    )


def test_the_readme_walkthrough_leaves_the_repository_topics_as_they_were(project: Path) -> None:
    # The README's topics walkthrough runs in the clone: it adds a topic, then removes it at its end.
    shipped = {name: (REPO / name).read_bytes() for name in ("deployments/topics.yaml", "prefect.yaml")}
    for name, content in shipped.items():
        (project / name).write_bytes(content)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "citeflow topics add caching" in readme and "citeflow topics remove caching" in readme

    added = add("caching", "--question", "How does citeflow cache a run's results?", "--cron", "0 7 * * *")
    assert added.exit_code == 0, added.output
    assert (project / "prefect.yaml").read_bytes() != shipped["prefect.yaml"]
    removed = runner.invoke(app, ["topics", "remove", "caching", "--db", str(project / "store.duckdb")])
    assert removed.exit_code == 0, removed.output

    assert {name: (project / name).read_bytes() for name in shipped} == shipped
