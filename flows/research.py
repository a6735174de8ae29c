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
from pathlib import Path

from citeflow.prefect_env import apply_prefect_defaults

apply_prefect_defaults()

from prefect import flow, get_run_logger, task, unmapped  # noqa: E402  (Prefect reads its settings on import)
from prefect.artifacts import (  # noqa: E402
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.futures import PrefectFuture  # noqa: E402
from prefect.runtime import flow_run  # noqa: E402
from prefect.states import Failed, State  # noqa: E402
from prefect.task_runners import ThreadPoolTaskRunner  # noqa: E402

from citeflow.audit import audit  # noqa: E402
from citeflow.config import Settings  # noqa: E402
from citeflow.contracts import (  # noqa: E402
    Claim,
    ClaimStatus,
    Question,
    Report,
    RunError,
    RunMetrics,
    StageMetrics,
    SubQuestion,
    SynthesisInput,
)
from citeflow.engine import build_engine  # noqa: E402
from citeflow.web.research import WebResearch, open_research  # noqa: E402
from citeflow.web.settings import WebSettings  # noqa: E402
from storage.store import EvidenceStore, get_store  # noqa: E402
from tasks.finish import finish, slug  # noqa: E402
from tasks.planner import plan  # noqa: E402
from tasks.researcher import Researched, research  # noqa: E402
from tasks.verifier import select_pages, verify_page  # noqa: E402
from tasks.writer import Review, write_report  # noqa: E402

STAGE_ROLES = {"plan": ("planner",), "verify": ("verifier",), "write": ("synthesiser", "critic")}


@task(name="plan", retries=1, retry_delay_seconds=2)
def plan_task(run_id: str, settings: Settings, question: str) -> list[SubQuestion]:
    return plan(
        get_store(settings.db), build_engine(settings), run_id, question, settings.caps.subquestions_max
    )


# One WebResearch per run, shared by its researcher tasks (threads of this process): it holds the
# per-run fetch deduplication and the breakers, and clients cannot be task arguments.
_web_research: dict[str, WebResearch] = {}


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
        _web_research[run_id],
        run_id,
        subquestion,
        caps.pages_per_search,
        caps.page_text_max_chars,
    )


@task(name="verify", task_run_name="verify-{claim_prefix}", retries=1, retry_delay_seconds=2)
def verify_task(
    run_id: str, settings: Settings, subquestion: SubQuestion, page_id: str, claim_prefix: str
) -> list[Claim]:
    engine = build_engine(settings)
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
        require_details=engine.name != "extractive",
    )


@task(name="write")
def write_task(settings: Settings, request: SynthesisInput) -> Review:
    return write_report(build_engine(settings), request, settings.caps.revisions_max)


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
    question: str, search: str | None = None, db: str | None = None, reports: str | None = None
) -> Report | State:
    """Answer `question` with a report whose every sentence cites a verified quote.

    `search`, `db` and `reports` override the settings (environment CITEFLOW_SEARCH, CITEFLOW_DB,
    CITEFLOW_REPORTS, or the defaults)."""
    overrides = {
        name: value for name, value in {"search": search, "db": db, "reports": reports}.items() if value
    }
    settings = Settings(**overrides)
    question = Question(text=question).text
    run_id = str(flow_run.id)
    store = get_store(Path(settings.db))
    _web_research[run_id] = open_research(run_id, settings.search, WebSettings.from_env(), store=store)
    try:
        report = run_stages(store, settings, run_id, question)
    finally:
        _web_research.pop(run_id).close()
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
    engine = build_engine(settings)
    store.start_run(run_id, question, engine.name, settings.search, settings.model_dump_json())
    key = slug(question)
    progress = create_progress_artifact(progress=0.0, key=f"progress-{key}", description=f"Run {run_id}")
    clock = StageClock()

    with clock.stage("plan"):
        subquestions = plan_task(run_id, settings, question)
    logger.info("plan: %d sub-questions: %s", len(subquestions), " | ".join(s.text for s in subquestions))
    update_progress_artifact(progress, 10.0)

    with clock.stage("research") as metrics:
        futures = research_task.map(unmapped(run_id), unmapped(settings), subquestions)
        researched: list[Researched] = settled(
            store, run_id, "research", futures, [s.id for s in subquestions]
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
    logger.info("research: %d distinct pages found, %d to verify", pages_found, len(pages))
    update_progress_artifact(progress, 40.0)

    by_id = {sub.id: sub for sub in subquestions}
    with clock.stage("verify") as metrics:
        futures = [
            verify_task.submit(run_id, settings, by_id[subquestion_id], page_id, f"C{n}")
            for n, (page_id, subquestion_id) in enumerate(pages, start=1)
        ]
        settled(store, run_id, "verify", futures, [subquestion_id for _, subquestion_id in pages])
        numbered = store.number_sources(run_id)
        claims = store.claims(run_id, ClaimStatus.verified)
        metrics.pages = len(pages)
        metrics.claims_verified = len(claims)
        metrics.claims_rejected = len(store.claims(run_id, ClaimStatus.rejected))
    logger.info("verify: %d claims verified, %d rejected", metrics.claims_verified, metrics.claims_rejected)
    update_progress_artifact(progress, 70.0)

    review = None
    with clock.stage("write") as metrics:
        if claims:
            request = SynthesisInput(
                question=question, subquestions=subquestions, claims=claims, sources=numbered
            )
            review = write_task(settings, request)
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
        len(pages),
        run_metrics(store, run_id, clock, started),
        Path(settings.reports),
    )
    publish_artifacts(report)
    update_progress_artifact(progress, 100.0)
    logger.info("finish: %s report at %s", report.status.value, report.report_path)
    return report
