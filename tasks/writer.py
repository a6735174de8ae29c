"""Synthesise and critique: draft, check mechanically, let the critic judge, revise at most N times.

Mechanical checks come first and a critic only sees drafts that pass them. Whatever the critic says,
a sentence that fails a mechanical check after the last revision is removed, never shipped.

The loop (`write_report`) takes its two steps from a `WriterSteps`: the flow passes the Prefect tasks
(`synthesise_task`, `critique_task`, each draft and each verdict a task run of its own, cached), tests and
benchmarks pass the engine's roles directly (`EngineSteps`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from prefect import task

from citeflow.checks import failing_sentences, mechanical_critique
from citeflow.contracts import Critique, Draft, DraftSentence, SynthesisInput
from citeflow.llm.budget import REVISION_SHARE
from citeflow.llm.settings import RoleName
from citeflow.roles import Engine
from tasks.caching import StageKey, cached_unless_degraded, fresh, role_identity
from tasks.context import current_run
from tasks.retries import not_rejected
from tasks.tracing import traced


class LoopEnd(StrEnum):
    approved = "approved"
    revision_cap = "revision_cap"
    same_draft = "same_draft"  # the revision changed nothing
    same_critique = "same_critique"  # the critic repeated itself: another round would too
    budget = "budget"  # REVISION_SHARE of the model budget is spent: no new revision starts


@dataclass
class Review:
    draft: Draft
    critique: Critique
    revisions: int
    end: LoopEnd
    removed: dict[int, str]  # position in the draft -> why the sentence failed the mechanical checks

    @property
    def kept(self) -> list[DraftSentence]:
        return [sentence for n, sentence in enumerate(self.draft.sentences) if n not in self.removed]

    @property
    def caveat(self) -> str | None:
        """The report's caveat for an unapproved ending, or None when the critic approved."""
        why = {
            LoopEnd.approved: None,
            LoopEnd.revision_cap: f"after {self.revisions} revision(s), the most allowed",
            LoopEnd.same_draft: "and a revision left the draft unchanged",
            LoopEnd.same_critique: "and repeated the same critique of the revised draft",
            LoopEnd.budget: f"and no revision was started because {REVISION_SHARE:.0%} of the model budget "
            "was spent",
        }[self.end]
        return why and f"The critic did not approve this report {why}."


def critique(engine: Engine, request: SynthesisInput, draft: Draft) -> Critique:
    """The mechanical verdict, and the critic's only when the mechanical checks pass."""
    mechanical = mechanical_critique(draft, request.claims)
    if not mechanical.approved:
        return mechanical
    return engine.critic.review(request, draft)


def revision_end(
    verdict: Critique,
    draft: Draft,
    previous: tuple[Draft, Critique] | None,
    revisions_done: int,
    revisions_max: int,
    may_revise: Callable[[], bool],
) -> LoopEnd | None:
    """Why the loop stops after `verdict` on `draft`, or None when one more revision may start."""
    if verdict.approved:
        return LoopEnd.approved
    if revisions_done >= revisions_max:
        return LoopEnd.revision_cap
    if previous is not None and draft == previous[0]:
        return LoopEnd.same_draft
    if previous is not None and verdict == previous[1]:
        return LoopEnd.same_critique
    if not may_revise():
        return LoopEnd.budget
    return None


class WriterSteps(Protocol):
    def synthesise(self, request: SynthesisInput) -> Draft: ...

    def critique(self, request: SynthesisInput, draft: Draft) -> Critique: ...


@dataclass(frozen=True)
class EngineSteps:
    """The loop's steps played by an engine's roles, in the calling thread."""

    engine: Engine

    def synthesise(self, request: SynthesisInput) -> Draft:
        return self.engine.synthesiser.write(request)

    def critique(self, request: SynthesisInput, draft: Draft) -> Critique:
        return critique(self.engine, request, draft)


def write_report(
    steps: WriterSteps, request: SynthesisInput, revisions_max: int, may_revise: Callable[[], bool]
) -> Review:
    """Draft, critique and revise until approved, out of revisions, stuck, or out of budget
    (`may_revise` answers whether a new revision may start)."""
    draft = steps.synthesise(request)
    verdict = steps.critique(request, draft)
    previous: tuple[Draft, Critique] | None = None
    revisions = 0
    while (end := revision_end(verdict, draft, previous, revisions, revisions_max, may_revise)) is None:
        previous = (draft, verdict)
        draft = steps.synthesise(request.model_copy(update={"previous": draft, "critique": verdict}))
        revisions += 1
        verdict = steps.critique(request, draft)
    removed = failing_sentences(draft, mechanical_critique(draft, request.claims))
    return Review(draft, verdict, revisions, end, removed)


def _request_parts(request: SynthesisInput) -> dict[str, Any]:
    """What a writer is shown of a request: the run id each claim carries is not part of it."""
    return request.model_dump(mode="json", exclude={"claims": {"__all__": {"run_id"}}})


def _synthesise_key(inputs: dict[str, Any]) -> list[Any]:
    return [_request_parts(inputs["request"]), role_identity(current_run().settings, RoleName.synthesiser)]


def _critique_key(inputs: dict[str, Any]) -> list[Any]:
    return [
        _request_parts(inputs["request"]),
        inputs["draft"],
        role_identity(current_run().settings, RoleName.critic),
    ]


@task(name="synthesise", retries=1, retry_delay_seconds=2, retry_condition_fn=not_rejected,
      cache_policy=StageKey(stage="synthesise", parts=_synthesise_key))  # fmt: skip
def synthesise_task(request: SynthesisInput) -> Draft:
    run = current_run()
    with traced(run.store, run.run_id, "synthesise", run.engine.name) as step:
        with cached_unless_degraded(run.models.degradations):
            draft = run.engine.synthesiser.write(request)
        step.detail = f"{len(draft.sentences)} sentences" + (" (a revision)" if request.previous else "")
    return draft


@task(name="critique", retries=1, retry_delay_seconds=2, retry_condition_fn=not_rejected,
      cache_policy=StageKey(stage="critique", parts=_critique_key))  # fmt: skip
def critique_task(request: SynthesisInput, draft: Draft) -> Critique:
    run = current_run()
    with traced(run.store, run.run_id, "critique", run.engine.name) as step:
        with cached_unless_degraded(run.models.degradations):
            verdict = critique(run.engine, request, draft)
        step.detail = verdict.notes
    return verdict


@dataclass(frozen=True)
class TaskSteps:
    """The loop's steps as Prefect tasks: each draft and each verdict is a task run, cached unless
    `refresh` asks for them to be computed again."""

    refresh: bool = False

    def synthesise(self, request: SynthesisInput) -> Draft:
        return fresh(synthesise_task, self.refresh)(request)

    def critique(self, request: SynthesisInput, draft: Draft) -> Critique:
        return fresh(critique_task, self.refresh)(request, draft)
