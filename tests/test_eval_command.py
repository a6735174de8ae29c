"""`citeflow eval` end to end on a small multi-hop dataset: every question a real run through the flow."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from openai_server import Reply
from typer.testing import CliRunner

from cli.main import app

runner = CliRunner()

PAGES = [
    ("Kerry Saxby-Junna", "Kerry Saxby-Junna (born 2 June 1961) is a retired Australian race walker. "
     "She was born in Young, New South Wales and grew up in Ballina, New South Wales."),
    ("Young, New South Wales", "Young is a town in the South West Slopes region of New South Wales. "
     "At the 2011 census, Young had a population of 6,960."),
    ("Ballina, New South Wales", "Ballina is a town in the Northern Rivers region of New South Wales. "
     "It lies at the mouth of the Richmond River."),
    ("Race walking", "Race walking is a long-distance discipline within the sport of athletics. "
     "It is a foot race in which one foot must appear to be in contact with the ground at all times."),
]  # fmt: skip
QUESTIONS = [
    {
        "id": "young",
        "question": "At the 2011 census, what was the population of the town where Kerry Saxby-Junna was "
        "born?",
        "answers": ["6,960"],
        "supporting": [
            {"url": "https://example.org/Kerry_Saxby-Junna", "title": "Kerry Saxby-Junna",
             "text": "She was born in Young, New South Wales and grew up in Ballina, New South Wales."},
            {"url": "https://example.org/Young,_New_South_Wales", "title": "Young, New South Wales",
             "text": "At the 2011 census, Young had a population of 6,960."},
        ],
    },
    {
        "id": "walk",
        "question": "In race walking, what must appear to be in contact with the ground at all times?",
        "answers": ["one foot"],
        "supporting": [
            {"url": "https://example.org/Race_walking", "title": "Race walking",
             "text": "It is a foot race in which one foot must appear to be in contact with the ground at "
                     "all times."},
        ],
    },
]  # fmt: skip


def dataset(folder: Path) -> tuple[Path, Path]:
    corpus, questions = folder / "tiny.corpus.jsonl", folder / "tiny.questions.jsonl"
    rows = [
        {"id": f"t{n}", "url": f"https://example.org/{title.replace(' ', '_')}", "title": title, "text": text}
        for n, (title, text) in enumerate(PAGES)
    ]
    corpus.write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")
    questions.write_text("\n".join(json.dumps(q) for q in QUESTIONS) + "\n", encoding="utf-8")
    return corpus, questions


async def artifact_keys(*keys: str) -> set[str]:
    """Which of `keys` the Prefect API holds (the test server is shared with other tests' runs)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async with get_client() as client:
        found = await client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=list(keys)))
        )
        return {artifact.key for artifact in found if artifact.key}


def test_eval_runs_every_question_through_the_flow_and_scores_it(prefect_api: None, tmp_path: Path) -> None:
    corpus, questions = dataset(tmp_path)
    out = tmp_path / "results.json"

    result = runner.invoke(
        app, ["eval", str(corpus), str(questions), "--out", str(out), "--concurrency", "2"]
    )

    assert result.exit_code == 0, result.output
    payload = json.loads(out.read_text(encoding="utf-8"))
    summary, results = payload["summary"], {r["id"]: r for r in payload["results"]}
    assert summary["questions"] == 2 and summary["errors"] == 0 and summary["integrity_problems"] == 0
    # The two-hop question: the second round found Young from "born in Young", and the report answers.
    young = results["young"]
    assert young["answered"] and young["answer_found"], young
    assert (young["covered_strict"], young["gold_pages_cited"]) == (2, 2)
    assert summary["answered_agreement"] == 1.0 and summary["evidence_recall_strict"] == 1.0
    assert "Overall" in result.stdout and "answer_recall" in result.stdout
    # No model is configured: no model judged the key facts, and the table does not pretend one did.
    assert summary["nugget_coverage_model"] is None and "nugget_coverage_model" not in result.stdout
    wanted = {"eval-tiny-questions", "eval-tiny-summary"}
    assert asyncio.run(artifact_keys(*wanted)) == wanted


def test_eval_without_the_gold_pages_says_not_found(prefect_api: None, tmp_path: Path) -> None:
    corpus, questions = dataset(tmp_path)
    out = tmp_path / "results.json"

    result = runner.invoke(
        app, ["eval", str(corpus), str(questions), "--unanswerable", "--limit", "1", "--out", str(out)]
    )

    assert result.exit_code == 0, result.output
    payload = json.loads(out.read_text(encoding="utf-8"))
    [young] = payload["results"]
    assert young["id"] == "young" and not young["expected_answered"]
    assert not young["answered"] and young["covered_strict"] == 0
    assert payload["summary"]["answered_agreement"] == 1.0


def test_eval_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    corpus, questions = dataset(tmp_path)
    missing = runner.invoke(app, ["eval", str(tmp_path / "nope.jsonl"), str(questions)])
    assert missing.exit_code == 1 and "nope.jsonl: is not a file" in missing.output
    past = runner.invoke(app, ["eval", str(corpus), str(questions), "--offset", "5"])
    assert past.exit_code == 1 and "--offset 5: is past the last question" in past.output


def test_eval_takes_the_run_options_to_the_model_path(prefect_api: None, tmp_path: Path) -> None:
    from openai_server import Reply, ScriptedServer

    corpus, questions = dataset(tmp_path)
    out = tmp_path / "results.json"
    with ScriptedServer() as server:
        # Every call fails: each role degrades to the extractive engine, and the calls are still counted.
        server.default = Reply(status=500, error="boom")
        result = runner.invoke(
            app,
            ["eval", str(corpus), str(questions), "--limit", "1", "--out", str(out),
             "--base-url", server.url, "--model", "scripted", "--set", "defaults.max_attempts=1"],
        )  # fmt: skip
        requested = {request.body["model"] for request in server.requests}

    assert result.exit_code == 0, result.output
    [young] = json.loads(out.read_text(encoding="utf-8"))["results"]
    assert young["status"] != "error" and young["model_calls"] > 0
    assert requested == {"scripted"}


def test_eval_judges_key_facts_by_the_critic_model_too(prefect_api: None, tmp_path: Path) -> None:
    from role_server import RoleServer

    corpus, questions = dataset(tmp_path)
    walk = QUESTIONS[1] | {
        "nuggets": ["In race walking one foot must appear to be in contact with the ground."],
        "nugget_support": [["https://example.org/Race_walking"]],
    }
    questions.write_text(json.dumps(walk) + "\n", encoding="utf-8")
    out = tmp_path / "results.json"
    with RoleServer() as server:
        # A judge that finds the key fact in no sentence, whatever the words say.
        server.handlers["judge"] = lambda received, n: Reply(content="none")
        result = runner.invoke(
            app,
            ["eval", str(corpus), str(questions), "--out", str(out),
             "--base-url", server.url, "--model", "scripted", "--set", "defaults.max_attempts=1"],
        )  # fmt: skip
        judged = [request.prompt for request in server.of("judge")]

    assert result.exit_code == 0, result.output
    payload = json.loads(out.read_text(encoding="utf-8"))
    [scored], summary = payload["results"], payload["summary"]
    assert len(judged) == 1 and walk["nuggets"][0] in judged[0]
    # The lexical judge finds the fact in the report; the model does not: both are reported.
    assert scored["judged"] and scored["nugget_coverage"] > 0 and scored["nugget_coverage_model"] == 0
    assert summary["nugget_coverage_model"] == 0.0 and summary["judge_fallbacks"] == 0
    assert "nugget_coverage_model" in result.stdout
