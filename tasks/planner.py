"""Plan: split the question into sub-questions, with the cap, the minimum and the numbering enforced here.

The question itself is always the first sub-question, so whatever a planner proposes the question is
researched. A proposed sub-question that shares no content word with the question is not about it and
is dropped. Behind a model planner's sub-questions come the fallback's (the extractive planner's), up
to the cap; so a model plan that fails, proposes nothing about the question or falls short of the
minimum is replaced or filled by the fallback's, and the run records that degradation.
"""

from __future__ import annotations

from typing import Any

from prefect import task

from citeflow.contracts import Outcome, SubQuestion, SynthesisInput
from citeflow.llm.errors import DegradableError
from citeflow.llm.settings import RoleName
from citeflow.roles import Engine
from citeflow.text import content_stems, normalise
from tasks.caching import Computed, StageKey, cached_unless_transient, role_identity
from tasks.context import current_run
from tasks.retries import not_rejected
from tasks.tracing import Step, traced


def about_question(question: str, subquestion: SubQuestion) -> bool:
    """Whether the sub-question shares a content word (stemmed) with the question."""
    return bool(set(content_stems(f"{subquestion.text} {subquestion.query}")) & set(content_stems(question)))


def enforce_plan(
    question: str,
    proposed: list[SubQuestion],
    max_subquestions: int,
    fill: list[SubQuestion] | None = None,
    min_subquestions: int = 1,
) -> list[SubQuestion]:
    """The question itself, then what a planner proposed: empty and duplicate sub-questions (the same
    text or the same query as an earlier one) dropped,
    the count capped, then `fill` sub-questions added (in order) while fewer than `min_subquestions`,
    numbered q1..qN in order."""
    seen: set[str] = set()
    kept: list[SubQuestion] = []

    def add(text: str, query: str) -> None:
        text, query = text.strip(), (query.strip() or text.strip())
        keys = {normalise(query).casefold(), normalise(text).casefold()}  # the same search, or question
        if text and not keys & seen and len(kept) < max_subquestions:
            seen.update(keys)
            kept.append(SubQuestion(id=f"q{len(kept) + 1}", position=len(kept), text=text, query=query))

    add(question, question)
    for sub in proposed:
        add(sub.text, sub.query)
    for sub in fill or []:
        if len(kept) >= min(min_subquestions, max_subquestions):
            break
        add(sub.text, sub.query)
    return kept


def plan(
    engine: Engine, question: str, max_subquestions: int, min_subquestions: int, step: Step
) -> list[SubQuestion]:
    """The question itself, then the planner's sub-questions about it; with a model planner, the
    extractive planner's fill the plan to its cap, and a plan short of the minimum is a degradation."""
    failure: DegradableError | None = None
    try:
        proposed = engine.planner.plan(question, max_subquestions)
    except DegradableError as error:
        proposed, failure = [], error
    usable = [sub for sub in proposed if about_question(question, sub)]
    subquestions = enforce_plan(question, usable, max_subquestions)
    fallback = engine.fallback_for("planner")
    if fallback is not None:
        short = failure is not None or len(subquestions) < min(min_subquestions, max_subquestions)
        # The fallback's sub-questions fill the plan to its cap: its rule-made searches for each
        # entity of the question find pages a model's wording misses, and cost no call.
        fill = fallback.planner.plan(question, max_subquestions)
        subquestions = enforce_plan(question, usable, max_subquestions, fill, max_subquestions)
        if short:
            record_plan_fallback(engine, failure, len(proposed), len(usable), min_subquestions)
            step.outcome = Outcome.degraded
    step.detail = f"{len(subquestions)} sub-questions" + (
        f" ({len(proposed) - len(usable)} proposed ones not about the question dropped)"
        if len(usable) < len(proposed)
        else ""
    )
    return subquestions


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
def plan_task(question: str) -> Computed[list[SubQuestion]]:
    run = current_run()
    caps = run.settings.caps
    with (
        traced(run.store, run.run_id, "plan", run.engine.name) as step,
        cached_unless_transient(run.models.degradations) as fallbacks,
    ):
        subquestions = plan(run.engine, question, caps.subquestions_max, caps.subquestions_min, step)
    return Computed(subquestions, fallbacks)


def record_plan_fallback(
    engine: Engine, failure: DegradableError | None, proposed: int, usable: int, min_subquestions: int
) -> None:
    if failure is not None:
        reason = str(failure)
        short = f"The planner model's plan was unusable ({failure.what}); the extractive planner's was used."
    else:
        reason = (
            f"the planner proposed {proposed} sub-question(s), {usable} of them about the question; "
            f"the plan needs {min_subquestions} with the question itself"
        )
        short = (
            f"The planner model gave {usable} usable sub-question(s) of the {min_subquestions - 1} needed "
            "beside the question; the extractive planner's filled the plan."
        )
    engine.degradations.add(
        "planner", "plan", reason, short, transient=failure is not None and failure.transient
    )


def enforce_follow_ups(
    existing: list[SubQuestion], proposed: list[SubQuestion], limit: int
) -> list[SubQuestion]:
    """Whatever a planner proposed for the second round: drop empty ones and those that ask what any
    sub-question asks (the same text or the same query), cap at `limit`, number them on from the plan
    (q4, q5, ... after q3)."""
    seen = {normalise(key).casefold() for sub in existing for key in (sub.text, sub.query)}
    kept: list[SubQuestion] = []
    for sub in proposed:
        text, query = sub.text.strip(), (sub.query.strip() or sub.text.strip())
        keys = {normalise(query).casefold(), normalise(text).casefold()}
        if not text or keys & seen or len(kept) == limit:
            continue
        seen.update(keys)
        position = len(existing) + len(kept)
        kept.append(SubQuestion(id=f"q{position + 1}", position=position, text=text, query=query))
    return kept


def follow_up(engine: Engine, evidence: SynthesisInput, limit: int, step: Step) -> list[SubQuestion]:
    """The second round's sub-questions, from what the first round verified (`evidence`). With a model
    planner, the fallback planner's follow-ups (its rules ask about each bridge entity the claims name)
    come first and the model's questions after them, up to the limit; a model that cannot answer leaves
    them to those rules, recorded."""
    if limit < 1:
        return []
    fallback = engine.fallback_for("planner")
    try:
        proposed = engine.planner.follow_up(evidence, limit)
    except DegradableError as error:
        if fallback is None:
            raise
        proposed = []
        engine.degradations.add(
            "planner",
            "follow-up",
            str(error),
            f"The planner model's follow-up questions were unusable ({error.what}); the extractive "
            "planner's were asked.",
            transient=error.transient,
        )
        step.outcome = Outcome.degraded
    if fallback is not None:
        # The rules' follow-ups first: they ask about every bridge entity the claims name, and a small
        # model's proposals were claims restated, not questions (hotpotqa, Qwen2.5 1.5B). The model's
        # questions fill what is left of the limit.
        asked = [sub for sub in proposed if sub.text.rstrip().endswith("?")]
        proposed = [*fallback.planner.follow_up(evidence, limit), *asked]
    followups = enforce_follow_ups(evidence.subquestions, proposed, limit)
    step.detail = f"{len(followups)} follow-up sub-questions"
    return followups


def _follow_up_key(inputs: dict[str, Any]) -> list[Any]:
    """The evidence the planner is shown, who plays it and the limit."""
    settings = current_run().settings
    evidence: SynthesisInput = inputs["evidence"]
    return [
        evidence,
        role_identity(settings, RoleName.planner),
        settings.caps.followups_max,
    ]


@task(
    name="follow-up",
    retries=1,
    retry_delay_seconds=2,
    retry_condition_fn=not_rejected,
    cache_policy=StageKey(stage="follow-up", parts=_follow_up_key),
)
def follow_up_task(evidence: SynthesisInput) -> Computed[list[SubQuestion]]:
    run = current_run()
    with (
        traced(run.store, run.run_id, "follow-up", run.engine.name) as step,
        cached_unless_transient(run.models.degradations) as fallbacks,
    ):
        followups = follow_up(run.engine, evidence, run.settings.caps.followups_max, step)
    return Computed(followups, fallbacks)
