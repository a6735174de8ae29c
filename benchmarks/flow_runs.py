"""Research runs against the simulation, through Prefect or with the same stage functions called directly,
and the figures each run leaves in the store: its traces, its model calls, its wall time.

Used by benchmarks/bench.py (critical path, orchestration overhead, re-run savings, tokens per report).
Prefect must already point at a server (PREFECT_API_URL) when `flow_run` is called.
"""

from __future__ import annotations

import contextvars
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from citeflow.config import load_settings
from citeflow.contracts import Claim, ClaimStatus, Critique, Draft, Report, SynthesisInput
from citeflow.roles import Degradation, degradation_caveats
from flows.lifecycle import owned_run
from flows.research import (
    TASK_WORKERS,
    StageClock,
    record_degradations,
    report_of,
    research_flow,
    run_metrics,
)
from storage.store import get_store
from tasks.context import current_run, open_run_context
from tasks.finish import finish
from tasks.planner import follow_up_task, plan_task
from tasks.researcher import Researched, record_research, research_task
from tasks.verifier import select_pages, verify_task
from tasks.writer import TaskSteps, critique_task, synthesise_task, write_report


@dataclass
class RoleTokens:
    calls: int
    prompt: int
    completion: int


@dataclass
class RunFigures:
    """What one run cost and where its time went."""

    run_id: str
    status: str
    wall: float  # seconds, as the caller saw it: from the call to the report
    flow_wall: float | None  # seconds from the flow run's start to its end, as Prefect recorded them
    ideal: float  # the critical path from the run's own traces (see `ideal_path`)
    path: dict[str, float]  # the parts of `ideal`
    stages: dict[str, float]  # wall seconds per stage, as the run measured them
    roles: dict[str, RoleTokens] = field(default_factory=dict)
    sentences: int = 0
    sources: int = 0

    @property
    def calls(self) -> int:
        return sum(role.calls for role in self.roles.values())

    @property
    def tokens(self) -> int:
        return sum(role.prompt + role.completion for role in self.roles.values())

    @property
    def efficiency(self) -> float:
        return self.ideal / (self.flow_wall or self.wall)

    @property
    def slowest_stage(self) -> str:
        name = max(self.stages, key=lambda stage: self.stages[stage])
        return f"{name} ({self.stages[name]:.2f} s)"


def _seconds(start: datetime, end: datetime) -> float:
    return (end - start).total_seconds()


def ideal_path(db: Path, run_id: str) -> dict[str, float]:
    """The run's critical path, from its traces: planning + the slowest researcher + one verification
    round + the follow-up call (the simulated model proposes no second round) + every synthesis and
    critique (the first draft and each revision).

    One verification round is the slowest verifier model call, timed from the moment the call holds its
    endpoint slot (model_calls.latency_seconds): a verify trace also counts the time its call queued for a
    slot, and that queueing is exactly what the figure must show, not hide."""
    store = get_store(db)
    with store.cursor() as cur:
        traces = cur.execute(
            "SELECT stage, started_at, ended_at FROM traces WHERE run_id = ? AND actor != 'cache'", [run_id]
        ).fetchall()
        (verify_call,) = cur.execute(  # type: ignore[misc]
            "SELECT max(latency_seconds) FROM model_calls WHERE run_id = ? AND role = 'verifier'", [run_id]
        ).fetchone()
    by_stage: dict[str, list[float]] = {}
    for stage, started, ended in traces:
        by_stage.setdefault(stage, []).append(_seconds(started, ended))
    return {
        "plan": max(by_stage.get("plan", [0.0])),
        "research (slowest)": max(by_stage.get("research", [0.0])),
        "verify (one round)": verify_call or max(by_stage.get("verify", [0.0])),
        "follow-up": sum(by_stage.get("follow-up", [])),
        "synthesise": sum(by_stage.get("synthesise", [])),
        "critique": sum(by_stage.get("critique", [])),
    }


def role_tokens(db: Path, run_id: str) -> dict[str, RoleTokens]:
    usage = get_store(db).role_usage(run_id)
    return {role: RoleTokens(u.calls, u.prompt_tokens, u.completion_tokens) for role, u in usage.items()}


def figures(db: Path, report: Report, wall: float, flow_wall: float | None) -> RunFigures:
    path = ideal_path(db, report.run_id)
    return RunFigures(
        run_id=report.run_id,
        status=report.status.value,
        wall=wall,
        flow_wall=flow_wall,
        ideal=sum(path.values()),
        path=path,
        stages={stage.stage: stage.wall_seconds for stage in report.metrics.stages},
        roles=role_tokens(db, report.run_id),
        sentences=len(report.sentences),
        sources=len(report.sources),
    )


def flow_seconds(run_id: str) -> float | None:
    """The flow run's wall time as Prefect recorded it (start_time to end_time)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(uuid.UUID(run_id))
    if run.start_time is None or run.end_time is None:
        return None
    return _seconds(run.start_time, run.end_time)


def flow_run(question: str, settings: dict[str, Any], refresh: bool) -> RunFigures:
    """One run of the research flow, as `citeflow run` makes it (minus the process start)."""
    started = time.perf_counter()
    state = research_flow(question=question, settings=settings, refresh=refresh, return_state=True)
    wall = time.perf_counter() - started
    report = report_of(state)
    if not isinstance(report, Report):
        raise RuntimeError(f"the run ended without a report: {state.message}")
    return figures(Path(settings["db"]), report, wall, flow_seconds(report.run_id))


@dataclass(frozen=True)
class FunctionSteps:
    """The writer's steps as the tasks' own functions, without Prefect."""

    def synthesise(self, request: SynthesisInput) -> tuple[Draft, int]:
        return current_run().fallbacks.take(synthesise_task.fn(request), reused=False)

    def critique(self, request: SynthesisInput, draft: Draft) -> tuple[Critique, bool]:
        return current_run().fallbacks.take(critique_task.fn(request, draft), reused=False)

    def complete(self, request: SynthesisInput, draft: Draft) -> Draft:
        return TaskSteps().complete(request, draft)


def direct_run(question: str, settings: dict[str, Any]) -> RunFigures:
    """The flow's work with no Prefect: each task's own function (`task.fn`, traces and store writes
    included) in a thread pool as large as the flow's task runner, the stages composed as
    flows/research.py composes them. No task runs, caching, artifacts or API calls."""
    started = time.perf_counter()
    loaded = load_settings(settings).settings
    caps, db = loaded.caps, Path(loaded.db)
    store = get_store(db)
    run_id = str(uuid.uuid4())
    clock = StageClock()
    degraded: list[Degradation] = []
    with (
        open_run_context(run_id, question, loaded, store) as run,
        owned_run(store, run_id, question, loaded, run.engine.name),
        ThreadPoolExecutor(max_workers=TASK_WORKERS) as pool,
    ):

        def submit(function: Callable[..., Any], *args: Any) -> Future[Any]:
            return pool.submit(contextvars.copy_context().run, function, *args)

        with clock.stage("plan") as metrics:
            subquestions = run.fallbacks.take(plan_task.fn(question), reused=False)
        store.add_subquestions(run_id, subquestions)
        record_degradations(run, metrics, degraded)
        with clock.stage("research"):
            researched: list[Researched] = [
                future.result() for future in [submit(research_task.fn, sub) for sub in subquestions]
            ]
            sources = [
                source
                for sub, one in zip(subquestions, researched, strict=True)
                for source in record_research(store, run_id, sub.id, one)
            ]
            pages, found = select_pages(sources, caps.pages_verified_max)
        by_id = {sub.id: sub for sub in subquestions}
        with clock.stage("verify") as metrics:
            verifying = [
                submit(verify_task.fn, by_id[sub_id], page_id, f"C{n}")
                for n, (page_id, sub_id) in enumerate(pages, start=1)
            ]
            checked: list[list[Claim]] = [
                run.fallbacks.take(future.result(), reused=False) for future in verifying
            ]
            store.add_claims(run_id, [claim for page in checked for claim in page])
            record_degradations(run, metrics, degraded)
            numbered = store.number_sources(run_id)
            claims = store.claims(run_id, ClaimStatus.verified)
        with clock.stage("follow-up") as metrics:  # the simulated model proposes none: no second round
            evidence = SynthesisInput(
                question=question, subquestions=subquestions, claims=claims, sources=numbered
            )
            store.add_subquestions(run_id, run.fallbacks.take(follow_up_task.fn(evidence), reused=False))
            record_degradations(run, metrics, degraded)
        with clock.stage("write") as metrics:
            request = SynthesisInput(
                question=question, subquestions=subquestions, claims=claims, sources=numbered
            )
            review = write_report(
                FunctionSteps(), request, caps.revisions_max, run.models.budget.may_start_revision
            )
            record_degradations(run, metrics, degraded)
        report = finish(
            store, run_id, question, run.engine.name, subquestions, review, numbered, claims, found,
            len({page_id for page_id, _ in pages}), run_metrics(store, run_id, clock, started),
            Path(loaded.reports), degradation_caveats(degraded) + run.models.budget.caveats(),
        )  # fmt: skip
    return figures(db, report, time.perf_counter() - started, None)


def median_run(runs: list[RunFigures]) -> RunFigures:
    """The run of median wall time (the upper median for an even count)."""
    ordered = sorted(runs, key=lambda run: run.wall)
    return ordered[len(ordered) // 2]
