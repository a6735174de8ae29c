"""The research flow: plan, research each sub-question, verify each page, write and critique, finish.

Tasks here are thin: each opens the process's shared store and engine and calls one plain stage
function from tasks/. Tasks take and return ids and small records, never clients or page bodies.
A stage that fails is recorded in the run's errors and the run goes on; only a run with nothing
verified ends without a report, and its Markdown says why.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import Task, flow, get_run_logger, task, unmapped
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.client.schemas.objects import TaskRun
from prefect.futures import PrefectFuture
from prefect.runtime import flow_run
from prefect.states import Failed, State
from prefect.task_runners import ThreadPoolTaskRunner

from citeflow.audit import audit
from citeflow.config import Settings
from citeflow.contracts import (
    Claim,
    ClaimStatus,
    Question,
    Report,
    RunError,
    RunMetrics,
    RunStatus,
    StageMetrics,
    SubQuestion,
    SynthesisInput,
)
from citeflow.errors import CiteflowError
from citeflow.extractive import extractive_engine
from citeflow.llm.errors import ModelRejected
from citeflow.llm.roles import ModelEngine, build_engine
from citeflow.llm.settings import load_model_settings
from citeflow.roles import Engine
from citeflow.web.research import WebResearch, open_research
from citeflow.web.settings import WebSettings
from storage.store import EvidenceStore, get_store
from tasks.finish import finish, slug
from tasks.planner import follow_up, plan
from tasks.researcher import Researched, research
from tasks.verifier import select_pages, verify_page
from tasks.writer import Review, write_report

STAGE_ROLES = {
    "plan": ("planner", "query_writer"),
    "follow-up": ("planner",),
    "verify": ("verifier",),
    "write": ("synthesiser", "critic"),
}


@dataclass
class RunServices:
    """What a run's tasks share and cannot take as arguments (Prefect hashes task arguments; clients
    do not hash): the web session with its per-run fetch deduplication and breakers, and the model
    engine with its budget and degradation log. Tasks are threads of this process."""

    web: WebResearch
    models: ModelEngine

    @property
    def engine(self) -> Engine:
        return self.models.engine


_services: dict[str, RunServices] = {}


def not_rejected(task: Task, task_run: TaskRun, state: State) -> bool:
    """Retry anything but a model endpoint's 400/401/403/404, which no retry changes."""
    return not isinstance(state.result(raise_on_failure=False), ModelRejected)


@task(name="plan", retries=1, retry_delay_seconds=2, retry_condition_fn=not_rejected)
def plan_task(run_id: str, settings: Settings, question: str) -> list[SubQuestion]:
    engine = _services[run_id].engine
    return plan(get_store(settings.db), engine, run_id, question, settings.caps.subquestions_max)


# No Prefect timeout_seconds on these sync tasks: it cannot interrupt a worker thread (measured), so
# the real limits are the fetcher's connect/read/total timeouts and the model client's timeout.
@task(
    name="research",
    task_run_name="research-{subquestion.id}",
    retries=2,
    retry_delay_seconds=[2, 8],
    retry_jitter_factor=0.5,
)
def research_task(run_id: str, settings: Settings, subquestion: SubQuestion) -> Researched:
    caps = settings.caps
    return research(
        get_store(settings.db),
        _services[run_id].web,
        run_id,
        subquestion,
        caps.pages_per_search,
        caps.page_text_max_chars,
    )


@task(
    name="verify",
    task_run_name="verify-{claim_prefix}",
    retries=1,
    retry_delay_seconds=2,
    retry_condition_fn=not_rejected,
)
def verify_task(
    run_id: str, settings: Settings, subquestion: SubQuestion, page_id: str, claim_prefix: str
) -> list[Claim]:
    engine = _services[run_id].engine
    return verify_page(
        get_store(settings.db),
        engine.extractor,
        engine.name,
        run_id,
        subquestion,
        page_id,
        claim_prefix,
        settings.caps.claims_per_page,
        settings.caps.quote_min_chars,
    )


@task(name="follow-up", retries=1, retry_delay_seconds=2, retry_condition_fn=not_rejected)
def follow_up_task(run_id: str, settings: Settings, evidence: SynthesisInput) -> list[SubQuestion]:
    engine = _services[run_id].engine
    return follow_up(get_store(settings.db), engine, run_id, evidence, settings.caps.followups_max)


@task(name="write")
def write_task(run_id: str, settings: Settings, request: SynthesisInput) -> Review:
    models = _services[run_id].models
    return write_report(models.engine, request, settings.caps.revisions_max, models.budget.may_start_revision)


def record_degradations(store: EvidenceStore, run_id: str, models: ModelEngine, stage: str) -> None:
    """A role that fell back to its safe default is an error row, and so a caveat of the report."""
    for degradation in models.degradations.drain():
        subject = f" ({degradation.subject})" if degradation.subject else ""
        detail = f"the {degradation.role} fell back to its default{subject}: {degradation.reason}"
        store.add_error(RunError(run_id=run_id, stage=stage, detail=detail))


def settled(
    store: EvidenceStore,
    run_id: str,
    stage: str,
    futures: list[PrefectFuture],
    subquestion_ids: list[str | None],
) -> list:
    """The results of mapped tasks that succeeded; each failure (after its retries) becomes an error row."""
    results = []
    for future, subquestion_id in zip(futures, subquestion_ids, strict=True):
        future.wait()
        if future.state.is_completed():
            results.append(future.result())
        else:
            store.add_error(
                RunError(
                    run_id=run_id,
                    stage=stage,
                    subquestion_id=subquestion_id,
                    detail=future.state.message or "",
                )
            )
    return results


class StageClock:
    """Wall seconds per stage, for the run metrics (finishing takes milliseconds and is not a stage)."""

    def __init__(self) -> None:
        self.stages: dict[str, StageMetrics] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[StageMetrics]:
        metrics = StageMetrics(stage=name)
        started = time.perf_counter()
        try:
            yield metrics
        finally:
            metrics.wall_seconds = round(time.perf_counter() - started, 3)
            self.stages[name] = metrics


def run_metrics(store: EvidenceStore, run_id: str, clock: StageClock, started: float) -> RunMetrics:
    usage = store.role_usage(run_id)
    stages = []
    for metrics in clock.stages.values():
        roles = STAGE_ROLES.get(metrics.stage, ())
        metrics.tokens_in = sum(usage[role].prompt_tokens for role in roles if role in usage)
        metrics.tokens_out = sum(usage[role].completion_tokens for role in roles if role in usage)
        stages.append(metrics)
    return RunMetrics(
        stages=stages,
        wall_seconds=round(time.perf_counter() - started, 3),
        model_calls=sum(role.calls for role in usage.values()),
        tokens_in=sum(role.prompt_tokens for role in usage.values()),
        tokens_out=sum(role.completion_tokens for role in usage.values()),
    )


def publish_artifacts(report: Report) -> None:
    key = slug(report.question)
    create_markdown_artifact(markdown=report.markdown, key=f"report-{key}", description=report.question)
    create_table_artifact(
        table=[
            {"id": s.id, "title": s.title, "url": s.url, "read": s.stored_at.isoformat()}
            for s in report.sources
        ],
        key=f"sources-{key}",
        description=f"Sources cited by run {report.run_id}",
    )
    create_table_artifact(
        table=[stage.model_dump() for stage in report.metrics.stages],
        key=f"metrics-{key}",
        description=f"Per-stage metrics of run {report.run_id}",
    )


@flow(name="citeflow-research", task_runner=ThreadPoolTaskRunner(max_workers=4))
def research_flow(
    question: str,
    search: str | None = None,
    db: str | None = None,
    reports: str | None = None,
    config: str | None = None,
    models: dict[str, dict[str, Any]] | None = None,
) -> Report | State:
    """Answer `question` with a report whose every sentence cites a verified quote.

    `search`, `db` and `reports` override the settings (environment CITEFLOW_SEARCH, CITEFLOW_DB,
    CITEFLOW_REPORTS, or the defaults). `config` names a citeflow.toml for the model roles and
    `models` overrides its sections, e.g. {"defaults": {"model": "qwen3:8b"}}; with no endpoint
    configured the extractive engine plays every role."""
    chosen: dict[str, Any] = {"search": search, "db": db, "reports": reports}
    overrides = {name: value for name, value in chosen.items() if value}
    settings = Settings(**overrides)
    question = Question(text=question).text
    model_settings = load_model_settings(Path(config) if config else None, overrides=models)
    run_id = str(flow_run.id)
    store = get_store(Path(settings.db))
    _services[run_id] = RunServices(
        web=open_research(run_id, settings.search, WebSettings.from_env(), store=store),
        models=build_engine(
            model_settings,
            store,
            run_id,
            caps=settings.caps,
            fallback=extractive_engine(settings.caps.subquestions_min),
        ),
    )
    try:
        report = run_stages(store, settings, run_id, question)
    except CiteflowError as error:  # e.g. a model endpoint refused the key: nothing useful can follow
        store.add_error(RunError(run_id=run_id, stage="run", detail=str(error)))
        store.finish_run(run_id, RunStatus.failed, f"No report: {error}", None, RunMetrics())
        raise
    finally:
        _services.pop(run_id).web.close()
    if report.status == "failed":
        return Failed(
            message=f"No report: {'; '.join(report.caveats) or 'nothing was verified'}", data=report
        )
    if problems := audit(store, report):  # a bug in a stage, never expected: say so loudly
        for problem in problems:
            store.add_error(RunError(run_id=run_id, stage="audit", detail=problem))
        return Failed(message=f"The report failed its integrity audit: {problems[0]}", data=report)
    return report


def run_stages(store: EvidenceStore, settings: Settings, run_id: str, question: str) -> Report:
    started = time.perf_counter()
    logger = get_run_logger()
    models = _services[run_id].models
    engine = models.engine
    store.start_run(run_id, question, engine.name, settings.search, settings.model_dump_json())
    key = slug(question)
    progress = create_progress_artifact(progress=0.0, key=f"progress-{key}", description=f"Run {run_id}")
    clock = StageClock()

    with clock.stage("plan"):
        subquestions = plan_task(run_id, settings, question)
    record_degradations(store, run_id, models, "plan")
    logger.info("plan: %d sub-questions: %s", len(subquestions), " | ".join(s.text for s in subquestions))
    update_progress_artifact(progress, 10.0)

    with clock.stage("research") as metrics:
        researching = research_task.map(unmapped(run_id), unmapped(settings), subquestions)
        researched: list[Researched] = settled(
            store, run_id, "research", researching, [s.id for s in subquestions]
        )
        for one in researched:
            logger.info("research %s", one.summary)
        pages, pages_found = select_pages(
            [source for one in researched for source in one.sources], settings.caps.pages_verified_max
        )
        metrics.pages = pages_found
    create_table_artifact(
        table=[{"subquestion": one.subquestion_id, **one.counts} for one in researched],
        key=f"research-{key}",
        description=f"Pages fetched, read from the store, skipped and failed per sub-question, run {run_id}",
    )
    pages_verified = len({page_id for page_id, _ in pages})
    logger.info("research: %d distinct pages found, %d to verify", pages_found, pages_verified)
    update_progress_artifact(progress, 40.0)

    by_id = {sub.id: sub for sub in subquestions}
    with clock.stage("verify") as metrics:
        verifying = [
            verify_task.submit(run_id, settings, by_id[subquestion_id], page_id, f"C{n}")
            for n, (page_id, subquestion_id) in enumerate(pages, start=1)
        ]
        settled(store, run_id, "verify", verifying, [subquestion_id for _, subquestion_id in pages])
        record_degradations(store, run_id, models, "verify")
        numbered = store.number_sources(run_id)
        claims = store.claims(run_id, ClaimStatus.verified)
        metrics.pages = pages_verified
        metrics.claims_verified = len(claims)
        metrics.claims_rejected = len(store.claims(run_id, ClaimStatus.rejected))
    logger.info("verify: %d claims verified, %d rejected", metrics.claims_verified, metrics.claims_rejected)
    update_progress_artifact(progress, 55.0)

    # Second round: follow-up sub-questions about what the verified claims lead to (a bridge entity the
    # question's relation still needs), researched and verified like the first round's.
    with clock.stage("follow-up") as metrics:
        evidence = SynthesisInput(
            question=question, subquestions=subquestions, claims=claims, sources=numbered
        )
        followups = follow_up_task(run_id, settings, evidence) if claims else []
        record_degradations(store, run_id, models, "follow-up")
        if followups:
            logger.info("follow-up: %s", " | ".join(s.text for s in followups))
            researching = research_task.map(unmapped(run_id), unmapped(settings), followups)
            researched_more: list[Researched] = settled(
                store, run_id, "research", researching, [s.id for s in followups]
            )
            more, found_more = select_pages(
                [source for one in researched_more for source in one.sources],
                settings.caps.pages_verified_max,
            )
            by_id |= {sub.id: sub for sub in followups}
            verifying = [
                verify_task.submit(run_id, settings, by_id[subquestion_id], page_id, f"C{n}")
                for n, (page_id, subquestion_id) in enumerate(more, start=len(pages) + 1)
            ]
            settled(store, run_id, "verify", verifying, [subquestion_id for _, subquestion_id in more])
            record_degradations(store, run_id, models, "verify")
            subquestions = [*subquestions, *followups]
            numbered = store.number_sources(run_id)
            first_round = len(claims)
            claims = store.claims(run_id, ClaimStatus.verified)
            pages_found += found_more
            pages_verified += len({page_id for page_id, _ in more})
            metrics.pages = len(more)
            metrics.claims_verified = len(claims) - first_round
    update_progress_artifact(progress, 70.0)

    review = None
    with clock.stage("write") as metrics:
        if claims:
            request = SynthesisInput(
                question=question, subquestions=subquestions, claims=claims, sources=numbered
            )
            review = write_task(run_id, settings, request)
            record_degradations(store, run_id, models, "write")
            metrics.sentences_removed = len(review.removed)
            logger.info(
                "write: %d sentences kept, %d removed, %d revisions",
                len(review.kept),
                len(review.removed),
                review.revisions,
            )
    update_progress_artifact(progress, 90.0)

    report = finish(
        store,
        run_id,
        question,
        engine.name,
        subquestions,
        review,
        numbered,
        claims,
        pages_found,
        pages_verified,
        run_metrics(store, run_id, clock, started),
        Path(settings.reports),
        models.budget.caveats(),
    )
    publish_artifacts(report)
    update_progress_artifact(progress, 100.0)
    logger.info("finish: %s report at %s", report.status.value, report.report_path)
    return report
