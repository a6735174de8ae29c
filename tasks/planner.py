"""Plan: split the question into sub-questions, with the cap and the numbering enforced here."""

from __future__ import annotations

from typing import Any

from prefect import task

from citeflow.contracts import SubQuestion
from citeflow.llm.settings import RoleName
from citeflow.roles import Engine
from citeflow.text import normalise
from tasks.caching import StageKey, cached_unless_degraded, role_identity
from tasks.context import current_run
from tasks.retries import not_rejected
from tasks.tracing import traced


def enforce_plan(question: str, proposed: list[SubQuestion], max_subquestions: int) -> list[SubQuestion]:
    """Whatever a planner proposed: drop empty and duplicate sub-questions, cap the count, number them
    q1..qN in order. With nothing usable left, the question itself is the one sub-question."""
    seen: set[str] = set()
    kept: list[SubQuestion] = []
    for sub in proposed:
        text, query = sub.text.strip(), (sub.query.strip() or sub.text.strip())
        key = normalise(query).casefold()
        if not text or key in seen:
            continue
        seen.add(key)
        kept.append(SubQuestion(id=f"q{len(kept) + 1}", position=len(kept), text=text, query=query))
        if len(kept) == max_subquestions:
            break
    return kept or [SubQuestion(id="q1", position=0, text=question, query=question)]


def plan(engine: Engine, question: str, max_subquestions: int) -> list[SubQuestion]:
    return enforce_plan(question, engine.planner.plan(question, max_subquestions), max_subquestions)


def _plan_key(inputs: dict[str, Any]) -> list[Any]:
    settings = current_run().settings
    caps = settings.caps
    return [
        inputs["question"],
        role_identity(settings, RoleName.planner),
        role_identity(settings, RoleName.query_writer),
        caps.subquestions_min,
        caps.subquestions_max,
    ]


@task(
    name="plan",
    retries=1,
    retry_delay_seconds=2,
    retry_condition_fn=not_rejected,
    cache_policy=StageKey(stage="plan", parts=_plan_key),
)
def plan_task(question: str) -> list[SubQuestion]:
    run = current_run()
    with traced(run.store, run.run_id, "plan", run.engine.name) as step:
        with cached_unless_degraded(run.models.degradations):
            subquestions = plan(run.engine, question, run.settings.caps.subquestions_max)
        step.detail = f"{len(subquestions)} sub-questions"
    return subquestions
