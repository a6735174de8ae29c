"""CI's quality floors: `citeflow eval`, extractive, on the first 20 hotpotqa-100 questions (one-fact) and on
four open questions of each summhay-dev topic (digests, scored by their key facts), scores at least what
tests/eval_floors.toml says, with no crashed run and no integrity problem (every citation traces to a
verified quote found in the page its run read: the audit of each report)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from tasks.evaluation import Summary, below_floors, load_floors

FLOORS = Path(__file__).parent / "eval_floors.toml"
QUESTIONS = 20
# summhay-dev holds two topics of nine questions each; four of each keep the test near four minutes.
TOPIC_QUESTIONS = 4


@pytest.mark.parametrize(("mode", "table"), [([], "floors"), (["--unanswerable"], "unanswerable")])
def test_hotpotqa_scores_at_or_above_its_floors(
    prefect_api: None, eval_dir: Path, tmp_path: Path, mode: list[str], table: str
) -> None:
    out = tmp_path / "eval.json"
    corpus, questions = eval_dir / "hotpotqa-100.corpus.jsonl", eval_dir / "hotpotqa-100.questions.jsonl"

    result = CliRunner().invoke(
        app, ["eval", str(corpus), str(questions), "--limit", str(QUESTIONS), "--out", str(out), *mode]
    )

    assert result.exit_code == 0, result.output
    summary = Summary.model_validate(json.loads(out.read_text(encoding="utf-8"))["summary"])
    assert summary.questions == QUESTIONS and summary.errors == 0
    assert_floors(summary, table)


@pytest.mark.parametrize(("offset", "table"), [(0, "summhay-dodge"), (9, "summhay-svb")])
def test_summhay_digests_score_at_or_above_their_floors(
    prefect_api: None, eval_dir: Path, tmp_path: Path, offset: int, table: str
) -> None:
    out = tmp_path / "eval.json"
    corpus, questions = eval_dir / "summhay-dev.corpus.jsonl", eval_dir / "summhay-dev.questions.jsonl"
    limit = ["--limit", str(TOPIC_QUESTIONS), "--offset", str(offset)]

    result = CliRunner().invoke(app, ["eval", str(corpus), str(questions), *limit, "--out", str(out)])

    assert result.exit_code == 0, result.output
    summary = Summary.model_validate(json.loads(out.read_text(encoding="utf-8"))["summary"])
    assert summary.questions == TOPIC_QUESTIONS and summary.errors == 0
    assert_floors(summary, table)


def assert_floors(summary: Summary, table: str) -> None:
    assert summary.integrity_problems == 0
    floors = load_floors(FLOORS, table)
    assert floors, f"{FLOORS} has no [{table}] floors"
    assert below_floors(summary, floors) == []
