"""The evaluation flow: a fresh store, every question a normal research run, scored only once it ended.

Questions run concurrently (each a `research_flow` run, as `citeflow run` makes one) up to a limit. A run
that crashes is recorded as an error and scores nothing; the others go on. With `unanswerable`, each
question gets a store of its own holding the corpus minus that question's gold pages, so the right
answer is a report that says the evidence does not answer it.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.artifacts import create_table_artifact
from pydantic import BaseModel

from citeflow.config import load_settings
from citeflow.contracts import Report
from citeflow.errors import CiteflowError
from citeflow.llm.budget import Budget, MemoryCallLog
from citeflow.llm.client import EndpointPool, RoleClient
from citeflow.llm.judge import ModelJudge
from citeflow.llm.settings import RoleName
from flows.research import report_of, research_flow
from storage.ingest import ingest_paths
from storage.store import get_store
from tasks.audit import audit
from tasks.evaluation import (
    EvalQuestion,
    Judge,
    QuestionResult,
    Summary,
    corpus_without,
    failed,
    load_questions,
    score,
    summarise,
)
from tasks.finish import slug

# Tries of a question whose run crashed outside the flow (the Prefect API failing), not of a failed run.
RUN_ATTEMPTS = 2


class Evaluation(BaseModel):
    summary: Summary
    results: list[QuestionResult]


def load_store(corpus: Path, folder: Path, without: set[str] | None = None) -> Path:
    """A new evidence store in `folder` holding the corpus, minus the pages at `without` if given."""
    folder.mkdir(parents=True, exist_ok=True)
    source = corpus_without(corpus, without, folder / "corpus.jsonl") if without else corpus
    db = folder / "evidence.duckdb"
    ingest_paths(get_store(db), [source])
    return db


def judge_maker(config: str | None, settings: dict[str, Any]) -> Callable[[], Judge] | None:
    """What makes a judge of the nuggets from the critic role's model, with a run's token budget each,
    when the settings give the critic an endpoint; None when the extractive engine plays the critic."""
    loaded = load_settings(settings, Path(config) if config else None).settings
    models = loaded.model_settings()
    role = models.role(RoleName.critic)
    if role is None:
        return None

    def make() -> Judge:
        log = MemoryCallLog()
        budget = Budget.for_settings(models, log, "eval-judge", loaded.caps.token_budget)
        return ModelJudge(
            RoleClient(RoleName.critic, role, EndpointPool(models.limits), budget, log, "eval-judge")
        )

    return make


def run_question(
    question: EvalQuestion,
    db: Path,
    reports: Path,
    config: str | None,
    settings: dict[str, Any],
    expected_answered: bool,
    judge: Judge | None = None,
) -> QuestionResult:
    """One question through the research flow, exactly as `citeflow run` sends it, then scored (its
    nuggets by `judge` too, when given). A run that could not start or finish at all is tried once more
    before it counts as an error."""
    started = time.perf_counter()
    for attempt in range(1, RUN_ATTEMPTS + 1):
        try:
            state = research_flow(
                question=question.question,
                settings={**settings, "db": str(db), "reports": str(reports)},
                config=config,
                return_state=True,
            )
            break
        except Exception as error:  # noqa: BLE001 - one question's crash is its result, never the eval's
            # A run that fails inside the flow comes back as a state; this one could not start or finish
            # at all (measured: a Prefect server answering 503 under load, once in 20 questions).
            if attempt == RUN_ATTEMPTS:
                seconds = time.perf_counter() - started
                return failed(question, f"{type(error).__name__}: {error}", seconds, expected_answered)
    seconds = time.perf_counter() - started
    report = report_of(state)
    if not isinstance(report, Report):
        return failed(question, state.message or str(report), seconds, expected_answered)
    store = get_store(db)
    return score(question, report, store, audit(store, report), seconds, expected_answered, judge)


def unanswerable_question(
    question: EvalQuestion,
    corpus: Path,
    folder: Path,
    reports: Path,
    config: str | None,
    settings: dict[str, Any],
    judge: Judge | None = None,
) -> QuestionResult:
    """The question against the corpus minus its own gold pages, in a store made for it and removed
    once scored (a hundred stores of a thousand pages would hold gigabytes for nothing)."""
    started = time.perf_counter()
    try:
        db = load_store(corpus, folder, question.gold_urls)
    except CiteflowError as error:
        return failed(question, str(error), time.perf_counter() - started, expected_answered=False)
    try:
        return run_question(question, db, reports, config, settings, expected_answered=False, judge=judge)
    finally:
        get_store(db).close()
        for path in folder.glob("evidence.duckdb*"):
            path.unlink()


def result_row(result: QuestionResult) -> dict[str, Any]:
    """A question's line of the table artifact and of the terminal table."""

    def yes(flag: bool) -> str:
        return "yes" if flag else "no"

    return {
        "id": result.id,
        "status": result.status,
        "answered": yes(result.answered),
        "evidence": f"{result.covered_strict}/{result.gold_sentences}",
        "gold pages": f"{result.gold_pages_cited}/{result.gold_pages}",
        "cited": result.pages_cited,
        "answer": yes(result.answer_found),
        "integrity": result.integrity_problems,
        **(
            {
                "nuggets": result.nuggets,
                "coverage": round(result.nugget_coverage / result.nuggets, 2),
                "cite F1": round(result.nugget_citation_f1 / result.nuggets, 2),
                "joint": round(result.nugget_joint / result.nuggets, 2),
            }
            if result.nuggets
            else {}
        ),
        **(
            {
                "model coverage": round(result.nugget_coverage_model / result.nuggets, 2),
                "model joint": round(result.nugget_joint_model / result.nuggets, 2),
            }
            if result.judged
            else {}
        ),
        "words": result.words,
        "calls": result.model_calls,
        "tokens": result.tokens,
        "seconds": result.seconds,
    }


def summary_figures(summary: Summary) -> dict[str, Any]:
    """The summary's figures that were measured (the model judge's only when one judged)."""
    return {name: value for name, value in summary.model_dump().items() if value is not None}


@flow(name="citeflow-eval")
def eval_flow(
    dataset: str,
    corpus: Path,
    questions: Path,
    folder: Path,
    limit: int | None = None,
    offset: int = 0,
    concurrency: int = 2,
    unanswerable: bool = False,
    config: str | None = None,
    settings: dict[str, Any] | None = None,
    on_result: Callable[[QuestionResult], None] | None = None,
) -> Evaluation:
    """Run and score questions `offset` .. `offset + limit` of the file `questions` of `dataset` (a name
    for the artifacts) against `corpus`, working in `folder` (stores and reports); `on_result` is called as
    each question finishes (a progress bar). The file is read here, not passed in: a question's gold
    pages (summhay's carry whole articles) would exceed Prefect's limit on a flow run's parameters."""
    chosen = load_questions(questions, limit, offset)
    given = settings or {}  # dotted settings for every run, as `citeflow run` takes them
    shared = None if unanswerable else load_store(corpus, folder / "store")
    reports = folder / "reports"

    make_judge = judge_maker(config, given)

    def one(question: EvalQuestion) -> QuestionResult:
        judge = make_judge() if make_judge and question.nuggets else None
        if shared is not None:
            result = run_question(
                question, shared, reports, config, given, expected_answered=True, judge=judge
            )
        else:
            own = folder / "stores" / slug(question.id)
            result = unanswerable_question(question, corpus, own, reports, config, given, judge)
        if on_result is not None:
            on_result(result)
        return result

    # Each question's thread runs in a copy of this context: Prefect's settings (the API the command
    # chose) live in context variables, and a thread without them starts an ephemeral server of its own.
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        running = [pool.submit(contextvars.copy_context().run, one, question) for question in chosen]
        results = [future.result() for future in running]
    summary = summarise(results)
    key = slug(f"eval {dataset} {'unanswerable' if unanswerable else ''}")
    create_table_artifact(
        table=[result_row(result) for result in results],
        key=f"{key}-questions",
        description=f"Per question: {len(results)} questions of {dataset}",
    )
    create_table_artifact(
        table=[{"figure": name, "value": value} for name, value in summary_figures(summary).items()],
        key=f"{key}-summary",
        description=f"Overall figures: {len(results)} questions of {dataset}",
    )
    return Evaluation(summary=summary, results=results)
