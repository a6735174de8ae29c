"""Scoring against gold evidence as ../shared/eval/README.md defines it, without running anything."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from openai_server import Reply, ScriptedServer

from citeflow.contracts import (
    Claim,
    ClaimStatus,
    Origin,
    PageInput,
    Report,
    ReportSentence,
    RunMetrics,
    RunStatus,
    SentenceStatus,
    Source,
)
from citeflow.errors import InputError
from citeflow.llm.budget import Budget, MemoryCallLog
from citeflow.llm.client import EndpointPool, RoleClient
from citeflow.llm.judge import ModelJudge
from citeflow.llm.settings import Limits, RoleConfig, RoleName
from storage.store import EvidenceStore
from tasks.evaluation import (
    EvalQuestion,
    below_floors,
    contains_answer,
    corpus_without,
    covers,
    failed,
    load_floors,
    load_questions,
    score,
    score_nugget,
    summarise,
)

GOLD = "https://example.org/nolan"
QUESTION = EvalQuestion.model_validate(
    {
        "id": "q-1",
        "question": "Is Christopher Nolan a film director?",
        "answers": ["yes"],
        "supporting": [
            {
                "url": GOLD,
                "title": "Nolan",
                "text": "Christopher Nolan is an English-American film director.",
            },
            {
                "url": "https://example.org/kalathil",
                "title": "K",
                "text": "Kalathil is an Indian film director.",
            },
        ],
    }
)


def test_covers_is_half_of_the_shorter_ones_tokens() -> None:
    assert covers("Nolan is an English-American film director and producer.", QUESTION.supporting[0].text)
    assert not covers("Nolan was born in London.", QUESTION.supporting[0].text)


def test_answers_are_whole_words_case_and_punctuation_free() -> None:
    assert contains_answer("The answer is yes.", ["Yes"])
    assert contains_answer("Born 8 June 1951, in Wales.", ["8 June, 1951"])
    assert not contains_answer("It is not known.", ["no"])  # "no" is not inside "not" or "known"


def test_questions_load_with_offset_and_limit_and_bad_lines_are_named(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    records = [QUESTION.model_dump() | {"id": f"q-{n}", "extra": 1} for n in range(5)]
    path.write_text("\n".join(json.dumps(record) for record in records) + "\n\n", encoding="utf-8")
    assert [q.id for q in load_questions(path, limit=2, offset=1)] == ["q-1", "q-2"]
    assert len(load_questions(path)) == 5
    path.write_text(json.dumps({"id": "x", "question": "Q?"}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"q.jsonl line 1: answers: Field required"):
        load_questions(path)


def test_corpus_without_the_gold_pages(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    rows = [{"url": url, "title": "t", "text": "x"} for url in (GOLD, "https://example.org/other")]
    corpus.write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")
    left = corpus_without(corpus, QUESTION.gold_urls, tmp_path / "left.jsonl")
    assert [json.loads(line)["url"] for line in left.read_text().splitlines()] == [
        "https://example.org/other"
    ]


def report_for(store: EvidenceStore, run_id: str) -> Report:
    """A report citing the gold page and one other page, with a verified quote from each."""
    gold, _ = store.put_page(
        PageInput(
            url=GOLD,
            title="Nolan",
            text="Christopher Nolan is an English-American film director. Rich.",
            origin=Origin.ingested,
        )
    )
    other, _ = store.put_page(
        PageInput(
            url="https://example.org/x",
            title="X",
            text="Kalathil is an Indian film director.",
            origin=Origin.ingested,
        )
    )
    claims = [
        Claim(
            id=f"C{n}",
            subquestion_id="q1",
            page_id=page.id,
            page_hash=page.content_hash,
            text=quote,
            quote=quote,
            quote_start=0,
            quote_end=len(quote),
            status=ClaimStatus.verified,
            source_id=f"S{n}",
        )
        for n, (page, quote) in enumerate(
            [
                (gold, "Christopher Nolan is an English-American film director."),
                (other, "Kalathil is an Indian film director."),
            ],
            start=1,
        )
    ]
    store.add_claims(run_id, claims)
    read = datetime(2024, 1, 1, tzinfo=UTC)
    return Report(
        run_id=run_id,
        question=QUESTION.question,
        status=RunStatus.complete,
        answered=True,
        markdown="# Q",
        sources=[
            Source(id=f"S{n}", page_id=claim.page_id, url=url, title="t", stored_at=read)
            for n, (claim, url) in enumerate(zip(claims, [GOLD, "https://example.org/x"], strict=True), 1)
        ],
        claims=claims[:1],  # a report lists only the claims of the sources it cites
        sentences=[
            ReportSentence(
                run_id=run_id,
                position=0,
                section="",
                text="The answer is yes.",
                cites=[],
                status=SentenceStatus.kept,
            ),
            ReportSentence(
                run_id=run_id,
                position=1,
                section="",
                text=claims[0].text,
                cites=["S1", "S2"],
                status=SentenceStatus.kept,
            ),
        ],
        caveats=[],
        metrics=RunMetrics(wall_seconds=1.0, model_calls=3, tokens_in=100, tokens_out=20),
    )


def test_a_report_is_scored_strictly_leniently_and_by_page(tmp_path: Path) -> None:
    with EvidenceStore.open(tmp_path / "s.duckdb") as store:
        result = score(QUESTION, report_for(store, "r1"), store, [], 2.5)
    # The Kalathil gold sentence is covered by a verified quote the report does not list, from a page that
    # is not its gold page: evidence counts every quote the run verified, here leniently only.
    assert (result.gold_sentences, result.covered_strict, result.covered_lenient) == (2, 1, 2)
    assert (result.gold_pages, result.gold_pages_cited, result.pages_cited) == (2, 1, 2)
    assert result.answer_found and result.answered and result.expected_answered
    assert (result.model_calls, result.tokens, result.words) == (3, 120, 11)

    summary = summarise([result, failed(QUESTION, "boom", 1.0)])
    assert summary.questions == 2 and summary.errors == 1
    assert summary.evidence_recall_strict == 0.25 and summary.evidence_recall_lenient == 0.5
    assert summary.supporting_page_recall == 0.25 and summary.citation_precision == 0.5
    assert summary.answer_recall == 0.5 and summary.answered_agreement == 0.5
    assert below_floors(summary, {"citation_precision": 0.5, "answer_recall": 0.6}) == [
        "answer_recall is 0.5, below its floor of 0.6"
    ]


def test_a_nugget_is_covered_fully_partly_or_not_and_its_citations_scored_by_f1() -> None:
    pages = ["https://example.org/a", "https://example.org/b"]
    sentences = [
        ("The lighthouse keeper rang the bell at dawn every morning.", {pages[0], "https://example.org/c"}),
        ("The lighthouse keeper lived alone.", {pages[1]}),
    ]
    # All content words of the nugget in the first sentence: full; one of two cited pages is gold, and one
    # of two gold pages is cited: F1 0.5.
    full = score_nugget("The keeper rang the lighthouse bell every morning.", pages, sentences)
    assert (full.coverage, full.citation_f1, full.joint) == (1.0, 0.5, 0.5)
    # "keeper" and "lighthouse" of five content words: partial, from the sentence that covers it best.
    partial = score_nugget("The lighthouse keeper painted boats on Sundays.", pages[1:], sentences)
    assert partial.coverage == 0.5 and partial.citation_f1 in (0.0, 1.0)
    none = score_nugget("Fishing quotas were cut by half.", pages, sentences)
    assert (none.coverage, none.citation_f1) == (0.0, 0.0)


def test_nuggets_are_scored_per_question_and_averaged_over_every_nugget(tmp_path: Path) -> None:
    question = QUESTION.model_copy(
        update={
            "nuggets": ["Christopher Nolan is a film director.", "Nolan was born in London in 1970."],
            "nugget_support": [[GOLD], [GOLD]],
        }
    )
    with EvidenceStore.open(tmp_path / "s.duckdb") as store:
        result = score(question, report_for(store, "r1"), store, [], 1.0)
    # The first nugget: full, cited by S1 (gold) and S2 (not): precision 0.5, recall 1, F1 2/3.
    assert result.nuggets == 2 and result.nugget_coverage == 1.0
    assert result.nugget_citation_f1 == pytest.approx(0.6667, abs=1e-3)
    summary = summarise([result, failed(question, "boom", 1.0)])
    assert summary.nugget_coverage == 0.25 and summary.nugget_joint == pytest.approx(0.167, abs=1e-3)
    assert summarise([failed(QUESTION, "boom", 1.0)]).nugget_joint == 0.0


def judge_on(server: ScriptedServer) -> ModelJudge:
    """The critic role on the scripted server, as `citeflow eval` makes its judge."""
    log = MemoryCallLog()
    config = RoleConfig(model="judge-model", base_url=server.url, max_attempts=1)
    return ModelJudge(
        RoleClient(RoleName.critic, config, EndpointPool(Limits()), Budget(log, "e", 10**6), log, "e")
    )


def test_a_model_judges_the_nuggets_beside_the_lexical_judge(tmp_path: Path) -> None:
    question = QUESTION.model_copy(
        update={
            "nuggets": ["Christopher Nolan is a film director.", "Nolan was born in London in 1970."],
            "nugget_support": [[GOLD], [GOLD]],
        }
    )
    with ScriptedServer() as server, EvidenceStore.open(tmp_path / "s.duckdb") as store:
        # The model reads the first nugget as stated in part by the second sentence, the other by none.
        server.enqueue(Reply(content="S2: partial"), Reply(content="none"))
        result = score(question, report_for(store, "r1"), store, [], 1.0, judge=judge_on(server))
        shown = server.requests[0].prompt
    assert "S2: Christopher Nolan is an English-American film director." in shown
    assert "Christopher Nolan is a film director." in shown
    # Lexically the first nugget is covered in full; the model says partly. Both read the same sentence,
    # which cites the gold page and one other: F1 2/3.
    assert result.judged and (result.nugget_coverage, result.nugget_coverage_model) == (1.0, 0.5)
    assert result.nugget_joint_model == pytest.approx(0.3333, abs=1e-3) and result.judge_fallbacks == 0
    summary = summarise([result])
    assert summary.nugget_coverage_model == 0.25 and summary.nugget_coverage == 0.5
    # With no judge the model's figures are not measured, and a floor on one says so.
    unjudged = summarise([failed(question, "boom", 1.0)])
    assert unjudged.nugget_joint_model is None
    assert below_floors(unjudged, {"nugget_joint_model": 0.1}) == [
        "nugget_joint_model has a floor of 0.1 but was not measured (no model judge is configured)"
    ]


def test_an_unusable_verdict_is_asked_again_once_then_the_lexical_judgment_stands(tmp_path: Path) -> None:
    question = QUESTION.model_copy(
        update={"nuggets": ["Christopher Nolan is a film director."], "nugget_support": [[GOLD]]}
    )
    with ScriptedServer() as server, EvidenceStore.open(tmp_path / "s.duckdb") as store:
        server.enqueue(Reply(content="The second one, I think."), Reply(content="S7: full"))
        result = score(question, report_for(store, "r1"), store, [], 1.0, judge=judge_on(server))
        retry = server.requests[1].prompt
    assert len(server.requests) == 2 and "That reply could not be used: no line reads" in retry
    # S7 names no sentence of a two-sentence report either: the lexical judgment counts for the nugget.
    assert result.judge_fallbacks == 1
    assert (result.nugget_coverage_model, result.nugget_joint_model) == (1.0, result.nugget_joint)


def test_floors_name_figures_of_the_evaluation(tmp_path: Path) -> None:
    floors = tmp_path / "floors.toml"
    floors.write_text("# floors only go up\n[floors]\nanswer_recall = 0.5\n", encoding="utf-8")
    assert load_floors(floors) == {"answer_recall": 0.5}
    floors.write_text("[floors]\nanswer_recal = 0.5\n", encoding="utf-8")
    with pytest.raises(InputError, match="answer_recal"):
        load_floors(floors)


def test_a_run_that_crashes_is_recorded_and_scores_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import flows.evaluate

    tries: list[object] = []

    def unavailable(**given: object) -> None:
        tries.append(given)
        raise RuntimeError("Server error '503 Service Unavailable'")

    monkeypatch.setattr(flows.evaluate, "research_flow", unavailable)
    result = flows.evaluate.run_question(QUESTION, tmp_path / "s.duckdb", tmp_path, None, {}, True)
    assert len(tries) == flows.evaluate.RUN_ATTEMPTS == 2  # a crash outside the flow is tried again once
    assert result.status == "error" and "503 Service Unavailable" in result.error
    assert (result.covered_strict, result.gold_sentences, result.answered) == (0, 2, False)
