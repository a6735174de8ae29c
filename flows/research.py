"""The research flow: plan, research each sub-question, verify each page, synthesise and critique, finish.

This module only composes: each stage is a Prefect task in tasks/ (one module per stage), cached by what
it reads, and the flow records what its run read and decided (a cached result was computed by another
run). A stage that fails is recorded in the run's errors and the run goes on; only a run with nothing
verified ends without a report, and its row says why. flows/lifecycle.py gives every run a final status.

`run_stages` reads as the pipeline: `Stages.plan`, `Stages.first_round`, `Stages.follow_up_round` (each
round a `RoundResult`: its sub-questions, what research found, the pages verified, the run's evidence
after it), `Stages.write`, then `finish_task` given one `Finding`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact
from prefect.futures import PrefectFuture
from prefect.runtime import flow_run
from prefect.states import Completed, Failed, State
from prefect.task_runners import ThreadPoolTaskRunner

from citeflow.config import load_settings
from citeflow.contracts import (
    Claim,
    ClaimStatus,
    Outcome,
    Question,
    Report,
    RunError,
    RunMetrics,
    RunSource,
    RunStatus,
    Source,
    StageMetrics,
    SubQuestion,
    SynthesisInput,
    Trace,
)
from citeflow.extractive.kind import caps_for, report_kind
from citeflow.roles import FALLBACK_STAGE_SUFFIX, Degradation, degradation_caveats
from flows.lifecycle import cancelled_on_sigterm, owned_run
from flows.notifications import notify as tell
from flows.topics import topic_question
from storage.store import EvidenceStore, get_store
from tasks.caching import Computed, fresh
from tasks.changes import Changes, changes_since_last_run
from tasks.context import RunContext, open_run_context
from tasks.finish import Finding, finish_task, slug
from tasks.planner import follow_up_task, plan_task
from tasks.researcher import Researched, record_research, research_task
from tasks.verifier import select_pages, verify_task
from tasks.writer import Review, TaskSteps, write_report

# The roles whose tokens each stage's metrics count; a role's tokens are counted once, so the planner's
# follow-up calls are in "plan".
STAGE_ROLES = {
    "plan": ("planner", "query_writer"),
    "verify": ("verifier",),
    "write": ("synthesiser", "critic"),
}


class StageClock:
    """Wall seconds per stage, for the run metrics."""

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
        degradations=sum(metrics.degradations for metrics in stages),
    )


def record_degradations(run: RunContext, stage: StageMetrics, done: list[Degradation]) -> None:
    """Each fallback of the stage: a count in the stage's metrics and (through `done`) a short caveat of
    the report; an error row with the full reason for each this run computed (a result reused from the
    cache had its fallbacks recorded once, by the run that computed it)."""
    computed, reused = run.fallbacks.drain()
    computed += run.models.degradations.drain()  # those of steps run in the flow's own thread
    for degradation in computed:
        subject = f" ({degradation.subject})" if degradation.subject else ""
        detail = f"the {degradation.role} fell back to the extractive engine{subject}: {degradation.reason}"
        run.store.add_error(
            RunError(run_id=run.run_id, stage=f"{stage.stage}{FALLBACK_STAGE_SUFFIX}", detail=detail)
        )
    stage.degradations += len(computed) + len(reused)
    done += computed + reused


def settled(
    run: RunContext, stage: str, futures: list[PrefectFuture], subquestion_ids: list[str | None]
) -> list:
    """The results of mapped tasks that succeeded, their fallbacks noted in the run's; each failure
    (after its retries) becomes an error row, and each result another run computed (a cache hit) a trace
    row saying so."""
    results = []
    for future, subquestion_id in zip(futures, subquestion_ids, strict=True):
        future.wait()
        state = future.state
        if not state.is_completed():
            run.store.add_error(
                RunError(
                    run_id=run.run_id, stage=stage, subquestion_id=subquestion_id, detail=state.message or ""
                )
            )
            continue
        cached = state.name == "Cached"
        if cached:
            now = datetime.now(UTC)
            reused = "result of an earlier run reused"
            run.store.add_trace(
                Trace(run_id=run.run_id, stage=stage, subquestion_id=subquestion_id, actor="cache",
                      started_at=now, ended_at=now, outcome=Outcome.ok, detail=reused)
            )  # fmt: skip
        result = future.result()  # research, which calls no model, returns its result bare
        results.append(run.fallbacks.take(result, cached) if isinstance(result, Computed) else result)
    return results


def research_pages(
    run: RunContext, subquestions: list[SubQuestion], refresh: bool
) -> tuple[list[dict[str, Any]], list[RunSource], int]:
    """Search and fetch for each sub-question (mapped tasks) and record what was found as this run's:
    (a row of URL counts per sub-question researched, the run's sources, distinct pages found)."""
    logger = get_run_logger()
    researcher = fresh(research_task, refresh).with_options(
        cache_expiration=timedelta(hours=run.settings.web.freshness_hours)
    )
    futures = researcher.map(subquestions)
    done: list[Researched] = settled(run, "research", futures, [s.id for s in subquestions])
    # `settled` keeps the completed results in order: each is this run's research of its sub-question.
    completed = [
        sub for sub, future in zip(subquestions, futures, strict=True) if future.state.is_completed()
    ]
    researched = list(zip(completed, done, strict=True))
    with run.store.session():
        sources = [
            source
            for sub, one in researched
            for source in record_research(run.store, run.run_id, sub.id, one)
        ]
    for sub, one in researched:
        logger.info("research %s: %s", sub.id, one.tally)
    counts = [{"subquestion": sub.id, **one.counts} for sub, one in researched]
    return counts, sources, len({source.page_id for source in sources})


def verify_pages(
    run: RunContext,
    subquestions: list[SubQuestion],
    pages: list[tuple[str, str]],
    first_number: int,
    refresh: bool,
    metrics: StageMetrics,
    degraded: list[Degradation],
) -> None:
    """Verify each chosen page for its sub-question (mapped tasks, claim ids C<first_number>... on) and
    store the claims, verified and rejected, as this run's, with the fallbacks of the calls."""
    by_id = {sub.id: sub for sub in subquestions}
    verifying = [
        fresh(verify_task, refresh).submit(by_id[subquestion_id], page_id, f"C{n}")
        for n, (page_id, subquestion_id) in enumerate(pages, start=first_number)
    ]
    checked: list[list[Claim]] = settled(run, "verify", verifying, [sub_id for _, sub_id in pages])
    claims = [claim for page in checked for claim in page]
    with run.store.session():
        run.store.add_claims(run.run_id, claims)
        record_degradations(run, metrics, degraded)
    metrics.claims_rejected += sum(claim.status is ClaimStatus.rejected for claim in claims)


@dataclass(frozen=True)
class RoundResult:
    """One research round: its sub-questions researched and their pages verified, and the run's verified
    evidence once it is done (every round's so far)."""

    subquestions: list[SubQuestion]
    research: list[dict[str, Any]]  # per sub-question researched: its id and URLs per status
    pages_found: int  # distinct pages its research found
    pages: list[tuple[str, str]]  # (page id, sub-question id) pairs it verified, one claim prefix each
    claims: list[Claim]  # the run's verified claims after this round
    sources: list[Source]  # the run's sources, numbered, after this round

    @property
    def pages_verified(self) -> int:
        return len({page_id for page_id, _ in self.pages})

    def evidence(self, question: str, subquestions: list[SubQuestion]) -> SynthesisInput:
        """What a role may write or ask from: the run's verified claims and sources after this round."""
        return SynthesisInput(
            question=question, subquestions=subquestions, claims=self.claims, sources=self.sources
        )


@dataclass
class Stages:
    """The stages of one run in order, with what they share: the run, whether to recompute, each stage's
    clock and metrics, the fallbacks for the report's caveats, and the progress shown in Prefect."""

    run: RunContext
    refresh: bool
    progress: UUID
    clock: StageClock = field(default_factory=StageClock)
    degraded: list[Degradation] = field(default_factory=list)

    def plan(self) -> list[SubQuestion]:
        """The sub-questions; the question itself when the plan task failed past its retries."""
        with self.clock.stage("plan") as metrics:
            planned = fresh(plan_task, self.refresh).submit(self.run.question)
            [subquestions] = settled(self.run, "plan", [planned], [None]) or [[]]
        if not subquestions:
            subquestions = [SubQuestion(id="q1", position=0, text=self.run.question, query=self.run.question)]
        with self.run.store.session():  # each stage's records in one short hold of the store file
            self.run.store.add_subquestions(self.run.run_id, subquestions)
            record_degradations(self.run, metrics, self.degraded)
        get_run_logger().info(
            "plan: %d sub-questions: %s", len(subquestions), " | ".join(s.text for s in subquestions)
        )
        update_progress_artifact(self.progress, 10.0)
        return subquestions

    def first_round(self, subquestions: list[SubQuestion]) -> RoundResult:
        """Research the plan's sub-questions, then verify the pages chosen, claim ids from C1."""
        logger = get_run_logger()
        with self.clock.stage("research") as metrics:
            research, sources, found = research_pages(self.run, subquestions, self.refresh)
            pages, _ = select_pages(sources, self.run.settings.caps.pages_verified_max)
            metrics.pages = found
        logger.info("research: %d distinct pages found, %d to verify", found, len({p for p, _ in pages}))
        update_progress_artifact(self.progress, 35.0)
        with self.clock.stage("verify") as metrics:
            verify_pages(self.run, subquestions, pages, 1, self.refresh, metrics, self.degraded)
            done = self.round_result(subquestions, research, found, pages)
            metrics.pages = done.pages_verified
            metrics.claims_verified = len(done.claims)
        logger.info("verify: %d claims verified, %d rejected", len(done.claims), metrics.claims_rejected)
        update_progress_artifact(self.progress, 55.0)
        return done

    def follow_up_round(self, first: RoundResult) -> RoundResult | None:
        """Follow-up sub-questions about what the first round's verified claims lead to (a bridge entity
        the question's relation still needs), researched and verified like the first round's, claim ids
        after its; None when there is nothing to follow."""
        caps = self.run.settings.caps
        with self.clock.stage("follow-up") as metrics:
            followups: list[SubQuestion] = []
            if first.claims and caps.followups_max:
                evidence = first.evidence(self.run.question, first.subquestions)
                asked = fresh(follow_up_task, self.refresh).submit(evidence)
                [followups] = settled(self.run, "follow-up", [asked], [None]) or [[]]
            with self.run.store.session():
                self.run.store.add_subquestions(self.run.run_id, followups)
                record_degradations(self.run, metrics, self.degraded)
            if not followups:
                return None
            get_run_logger().info("follow-up: %s", " | ".join(s.text for s in followups))
            research, sources, found = research_pages(self.run, followups, self.refresh)
            pages, _ = select_pages(sources, caps.pages_verified_max)
            first_number = len(first.pages) + 1
            verify_pages(self.run, followups, pages, first_number, self.refresh, metrics, self.degraded)
            done = self.round_result(followups, research, found, pages)
            metrics.pages = len(pages)
            metrics.claims_verified = len(done.claims) - len(first.claims)
        return done

    def round_result(
        self,
        subquestions: list[SubQuestion],
        research: list[dict[str, Any]],
        pages_found: int,
        pages: list[tuple[str, str]],
    ) -> RoundResult:
        with self.run.store.session():
            sources = self.run.store.number_sources(self.run.run_id)
            claims = self.run.store.claims(self.run.run_id, ClaimStatus.verified)
        return RoundResult(subquestions, research, pages_found, pages, claims, sources)

    def write(self, evidence: SynthesisInput) -> Review | None:
        """The report's sentences, drafted, checked and critiqued; None when nothing was verified."""
        review: Review | None = None
        with self.clock.stage("write") as metrics:
            if evidence.claims:
                caps, budget = self.run.settings.caps, self.run.models.budget
                review = write_report(
                    TaskSteps(self.refresh), evidence, caps.revisions_max, budget.may_start_revision
                )
                with self.run.store.session():
                    record_degradations(self.run, metrics, self.degraded)
                metrics.sentences_removed = len(review.removed)
                get_run_logger().info(
                    "write: %d sentences kept, %d removed, %d revisions",
                    len(review.kept),
                    len(review.removed),
                    review.revisions,
                )
        update_progress_artifact(self.progress, 90.0)
        return review


def run_stages(run: RunContext, artifact_key: str, refresh: bool) -> tuple[Report, Changes | None]:
    """The stages in order; the report, and for a recurring topic what changed since its last run."""
    started = time.perf_counter()
    progress = create_progress_artifact(
        progress=0.0, key=f"progress-{artifact_key}", description=f"Run {run.run_id}"
    )
    stages = Stages(run, refresh, progress)

    planned = stages.plan()
    rounds = [stages.first_round(planned)]
    if (second := stages.follow_up_round(rounds[0])) is not None:
        rounds.append(second)
    create_table_artifact(
        table=[row for one in rounds for row in one.research],
        key=f"research-{artifact_key}",
        description="Pages fetched, read from the store, skipped and failed per sub-question, "
        f"run {run.run_id}",
    )
    update_progress_artifact(progress, 70.0)
    subquestions = [sub for one in rounds for sub in one.subquestions]
    last = rounds[-1]
    review = stages.write(last.evidence(run.question, subquestions))

    with run.store.session():
        changes = changes_since_last_run(run.store, run.topic, run.run_id, last.claims) if run.topic else None
        metrics = run_metrics(run.store, run.run_id, stages.clock, started)
    found = Finding(
        subquestions=subquestions,
        review=review,
        sources=last.sources,
        claims=last.claims,
        pages_found=sum(one.pages_found for one in rounds),
        pages_verified=sum(one.pages_verified for one in rounds),
        metrics=metrics,
        changes=changes,
        fallback_caveats=degradation_caveats(stages.degraded),
    )
    report = finish_task(found, artifact_key)
    update_progress_artifact(progress, 100.0)
    get_run_logger().info("finish: %s report at %s", report.status.value, report.report_path)
    return report, changes


class NoReport(Exception):  # noqa: N818 - what the run ended with, as Prefect shows it
    """A run that ended with no report, carrying the failed Report. A Failed state holds this rather
    than the Report: Prefect's engine raises a failed flow's data, and data that is no exception made it
    log "TypeError: Unexpected result for failed state" instead."""

    def __init__(self, report: Report) -> None:
        super().__init__(f"No report: {'; '.join(report.caveats) or 'nothing was verified'}")
        self.report = report

    def __reduce__(self) -> tuple[type[NoReport], tuple[Report]]:
        return NoReport, (self.report,)  # pickled with its report, as Prefect persists results


def report_of(state: State) -> Any:
    """A finished flow run's Report, failed ones included; else what it ended with (an exception)."""
    result = state.result(raise_on_failure=False)
    return result.report if isinstance(result, NoReport) else result


def final_state(report: Report) -> Report | State:
    """What Prefect shows: a partial report is Completed but named so; a failed one is Failed."""
    if report.status is RunStatus.failed:
        failure = NoReport(report)
        return Failed(message=str(failure), data=failure)
    if report.status is RunStatus.partial:
        return Completed(name="Partial", message="; ".join(report.caveats)[:500], data=report)
    return report


# The pool only holds threads; what may run at once is limited where it costs: model calls in flight per
# endpoint (models.max_concurrent_per_endpoint, at most 64) and requests per web host (web.per_domain_*).
# A pool smaller than those limits queued tasks that could have started (16 pages verified 4 at a time
# took four model round trips instead of one), and an idle thread costs nothing.
TASK_WORKERS = 64


def run_name() -> str:
    """A flow run's name in the Prefect UI: its topic (or its question) and the day it ran."""
    parameters = flow_run.parameters
    label = parameters.get("topic") or slug(str(parameters.get("question", "")), 40)
    return f"{label}-{datetime.now(UTC):%Y-%m-%d}"


@flow(
    name="citeflow-research",
    flow_run_name=run_name,
    task_runner=ThreadPoolTaskRunner(max_workers=TASK_WORKERS),
)
def research_flow(
    question: str | None = None,
    settings: dict[str, Any] | None = None,
    config: str | None = None,
    refresh: bool = False,
    topic: str | None = None,
    notify: str | None = None,
) -> Report | State:
    """Answer `question` with a report whose every sentence cites a verified quote; with no question, the
    question of the recurring `topic` in deployments/topics.yaml (how a topic's deployment runs).

    `settings` overrides the settings tree by dotted name, e.g. {"search": "wikipedia,local",
    "caps.token_budget": 50000, "defaults.model": "qwen3:8b"}, over the environment and `config` (a
    citeflow.toml; ./citeflow.toml when it exists). `refresh` recomputes every stage instead of reusing
    cached results. A recurring `topic` keys the artifacts (report-TOPIC, changes-TOPIC, ...) and gets a
    "What changed" section; `notify` names a Prefect notification block (TYPE/NAME) told of a topic's run
    that finds changes or fails. With no model endpoint configured the extractive engine plays every role."""
    loaded = load_settings(settings, Path(config) if config else None, flags_source="flow parameter settings")
    if question is None:  # a topic's deployment: its question is read here, never templated by Prefect
        question = topic_question(topic or "")
    question = Question(text=question).text
    # An open question's digest reads more widely (citeflow/extractive/kind.py); the run stores these caps.
    caps = caps_for(report_kind(question), loaded.settings.caps)
    settings = loaded.settings.model_copy(update={"caps": caps})
    run_id = str(flow_run.id)
    store = get_store(settings.db, settings.store)
    with (
        open_run_context(run_id, question, settings, store, topic) as run,
        owned_run(store, run_id, question, settings, run.engine.name, topic),
        cancelled_on_sigterm(Path(settings.db)),
    ):
        try:
            report, changes = run_stages(run, topic or slug(question), refresh)
        except Exception as error:
            if topic and notify:
                tell(notify, topic, "the run failed", f"{type(error).__name__}: {error}")
            raise
        if (
            topic
            and notify
            and (report.status is RunStatus.failed or (changes is not None and changes.found))
        ):
            tell(
                notify,
                topic,
                "no report" if report.status is RunStatus.failed else "changes found",
                report.markdown,
            )
        return final_state(report)
