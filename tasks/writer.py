"""Synthesise and critique: draft, check mechanically, let the critic judge, revise at most N times.

Each draft first loses the citations that support nothing in its sentences; then the mechanical checks
run, and a critic only sees drafts that pass them. A draft none of whose sentences passes is replaced by
the fallback synthesiser's (the extractive engine's) from the same claims, and so is a draft the
synthesiser could not give at all. When the critic never approves, the report is the last draft that
passed the mechanical checks whole. Whatever the critic says, a sentence that fails a mechanical check
is removed, never shipped: with verified claims, a report always has sentences, and (with a fallback)
what the extractive report says is said by one of them.

The loop (`write_report`) takes its steps from a `WriterSteps`: the flow passes the Prefect tasks
(`synthesise_task`, `critique_task`, each draft and each verdict a task run of its own, cached), tests and
benchmarks pass the engine's roles directly (`EngineSteps`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from prefect import task

from citeflow.checks import failing_sentences, mechanical_critique, prune_citations
from citeflow.contracts import Critique, Draft, DraftSentence, SynthesisInput
from citeflow.llm.budget import REVISION_SHARE
from citeflow.llm.errors import DegradableError
from citeflow.llm.settings import RoleName
from citeflow.roles import Engine
from citeflow.verify import content_support
from tasks.caching import Computed, StageKey, cached_unless_transient, fresh, role_identity
from tasks.context import current_run
from tasks.retries import not_rejected
from tasks.tracing import traced

# A claim is reported when sentences citing its source hold this share of its content words.
REPORTED_MIN_SHARE = 0.5


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
    critic_ran: bool = True  # False when no draft passed the mechanical checks, so no critic judged one
    earlier_draft: bool = False  # the report is an earlier draft than the last: the last one failed checks
    cites_dropped: int = 0  # citations removed from the shipped draft because they supported nothing

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
        if why is None:
            return None
        if not self.critic_ran:  # then no draft was clean, so the report is the last one, trimmed
            return "No draft passed the mechanical citation checks whole, so no critic judged one."
        line = f"The critic did not approve this report {why}"
        if self.earlier_draft:
            line += "; the report is the last draft that passed the mechanical checks"
        return line + "."


def critique(engine: Engine, request: SynthesisInput, draft: Draft) -> tuple[Critique, bool]:
    """The mechanical verdict, and the critic's only when the mechanical checks pass (then True).
    A critic that cannot answer is replaced by the fallback's for this draft, and recorded."""
    mechanical = mechanical_critique(draft, request.claims)
    if not mechanical.approved:
        return mechanical, False
    try:
        return engine.critic.review(request, draft), True
    except DegradableError as error:
        fallback = engine.fallback_for("critic")
        if fallback is None:
            raise
        engine.degradations.add(
            "critic",
            "report",
            str(error),
            f"The critic model did not judge a draft ({error.what}); the mechanical checks judged it.",
            transient=error.transient,
        )
        return fallback.critic.review(request, draft), True


def draft_report(engine: Engine, request: SynthesisInput) -> tuple[Draft, int]:
    """A draft from the synthesiser, its citations pruned, and how many were dropped. The fallback
    synthesiser's draft from the same claims replaces one that could not be written, or whose every
    sentence fails the mechanical checks."""
    fallback = engine.fallback_for("synthesiser")
    transient = False
    try:
        draft, why, reason = engine.synthesiser.write(request), "", ""
    except DegradableError as error:
        if fallback is None:
            raise
        draft, why, reason, transient = Draft(sentences=[]), error.what, str(error), error.transient
    draft, dropped = prune_citations(draft, request.claims)
    if fallback is not None and request.claims and not why:
        verdict = mechanical_critique(draft, request.claims)
        if len(failing_sentences(draft, verdict)) == len(draft.sentences):
            why = "failed the checks in every sentence"
            reason = f"every one of the draft's {len(draft.sentences)} sentences failed: {verdict.notes}"
    if why and fallback is not None:
        engine.degradations.add(
            "synthesiser",
            "report",
            reason,
            f"The synthesiser model's draft {why}; the extractive draft from the same claims was used.",
            transient=transient,
        )
        fresh = request.model_copy(update={"previous": None, "critique": None})
        draft, dropped = prune_citations(fallback.synthesiser.write(fresh), request.claims)
    return draft, dropped


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
    def synthesise(self, request: SynthesisInput) -> tuple[Draft, int]: ...

    def critique(self, request: SynthesisInput, draft: Draft) -> tuple[Critique, bool]: ...

    def complete(self, request: SynthesisInput, draft: Draft) -> Draft: ...


@dataclass(frozen=True)
class EngineSteps:
    """The loop's steps played by an engine's roles, in the calling thread."""

    engine: Engine

    def synthesise(self, request: SynthesisInput) -> tuple[Draft, int]:
        return draft_report(self.engine, request)

    def critique(self, request: SynthesisInput, draft: Draft) -> tuple[Critique, bool]:
        return critique(self.engine, request, draft)

    def complete(self, request: SynthesisInput, draft: Draft) -> Draft:
        return with_extractive_floor(self.engine, request, draft)


def write_report(
    steps: WriterSteps, request: SynthesisInput, revisions_max: int, may_revise: Callable[[], bool]
) -> Review:
    """Draft, critique and revise until approved, out of revisions, stuck, or out of budget
    (`may_revise` answers whether a new revision may start)."""
    draft, dropped = steps.synthesise(request)
    verdict, critic_ran = steps.critique(request, draft)
    clean = (draft, verdict, dropped) if critic_ran else None  # the last draft passing the checks whole
    previous: tuple[Draft, Critique] | None = None
    revisions = 0
    while (end := revision_end(verdict, draft, previous, revisions, revisions_max, may_revise)) is None:
        previous = (draft, verdict)
        draft, dropped = steps.synthesise(request.model_copy(update={"previous": draft, "critique": verdict}))
        revisions += 1
        verdict, judged = steps.critique(request, draft)
        critic_ran = critic_ran or judged
        if judged:
            clean = (draft, verdict, dropped)
    earlier = clean is not None and clean[0] is not draft
    if earlier and clean is not None:
        draft, verdict, dropped = clean
    draft = steps.complete(request, draft)
    removed = failing_sentences(draft, mechanical_critique(draft, request.claims))
    return Review(draft, verdict, revisions, end, removed, critic_ran, earlier, dropped)


def reported(sentence: DraftSentence, sentences: list[DraftSentence]) -> bool:
    """Whether sentences citing one of `sentence`'s sources say most of what it says."""
    said = " ".join(other.text for other in sentences if set(other.cites) & set(sentence.cites))
    return bool(said) and content_support(sentence.text, said)[0] >= REPORTED_MIN_SHARE


def with_extractive_floor(engine: Engine, request: SynthesisInput, draft: Draft) -> Draft:
    """The draft, plus each sentence the fallback synthesiser (the extractive engine) writes from the same
    claims that no sentence of the draft passing the checks reports (`reported`): a model that writes one
    sentence where the extractive report gives the answer and its support must not lose them. Recorded as
    a degradation; unchanged without a fallback, or when the draft already says it all."""
    fallback = engine.fallback_for("synthesiser")
    if fallback is None:
        return draft
    failing = failing_sentences(draft, mechanical_critique(draft, request.claims))
    kept = [sentence for n, sentence in enumerate(draft.sentences) if n not in failing]
    fresh = request.model_copy(update={"previous": None, "critique": None})
    floor, _ = prune_citations(fallback.synthesiser.write(fresh), request.claims)
    missing = [sentence for sentence in floor.sentences if not reported(sentence, kept)]
    if not missing:
        return draft
    engine.degradations.add(
        "synthesiser",
        "report",
        f"no sentence of the draft reported {len(missing)} sentence(s) of the extractive report: "
        + " | ".join(sentence.text for sentence in missing),
        f"The synthesiser model's report left out {len(missing)} sentence(s) the extractive report gives; "
        "they were added.",
    )
    return Draft(sentences=[*draft.sentences, *missing])


def _synthesise_key(inputs: dict[str, Any]) -> list[Any]:
    return [inputs["request"], role_identity(current_run().settings, RoleName.synthesiser)]


def _critique_key(inputs: dict[str, Any]) -> list[Any]:
    return [
        inputs["request"],
        inputs["draft"],
        role_identity(current_run().settings, RoleName.critic),
    ]


@task(name="synthesise", retries=1, retry_delay_seconds=2, retry_condition_fn=not_rejected,
      cache_policy=StageKey(stage="synthesise", parts=_synthesise_key))  # fmt: skip
def synthesise_task(request: SynthesisInput) -> Computed[tuple[Draft, int]]:
    run = current_run()
    with traced(run.store, run.run_id, "synthesise", run.engine.name) as step:
        with cached_unless_transient(run.models.degradations) as fallbacks:
            draft, dropped = draft_report(run.engine, request)
        step.detail = f"{len(draft.sentences)} sentences" + (" (a revision)" if request.previous else "")
    return Computed((draft, dropped), fallbacks)


@task(name="critique", retries=1, retry_delay_seconds=2, retry_condition_fn=not_rejected,
      cache_policy=StageKey(stage="critique", parts=_critique_key))  # fmt: skip
def critique_task(request: SynthesisInput, draft: Draft) -> Computed[tuple[Critique, bool]]:
    run = current_run()
    with traced(run.store, run.run_id, "critique", run.engine.name) as step:
        with cached_unless_transient(run.models.degradations) as fallbacks:
            verdict, judged = critique(run.engine, request, draft)
        step.detail = verdict.notes if judged else f"mechanical checks only: {verdict.notes}"
    return Computed((verdict, judged), fallbacks)


@dataclass(frozen=True)
class TaskSteps:
    """The loop's steps as Prefect tasks: each draft and each verdict is a task run, cached unless
    `refresh` asks for them to be computed again."""

    refresh: bool = False

    def synthesise(self, request: SynthesisInput) -> tuple[Draft, int]:
        state = fresh(synthesise_task, self.refresh)(request, return_state=True)
        return current_run().fallbacks.take(state.result(), reused=state.name == "Cached")

    def critique(self, request: SynthesisInput, draft: Draft) -> tuple[Critique, bool]:
        state = fresh(critique_task, self.refresh)(request, draft, return_state=True)
        return current_run().fallbacks.take(state.result(), reused=state.name == "Cached")

    def complete(self, request: SynthesisInput, draft: Draft) -> Draft:
        """In the flow's thread: the fallback's sentences cost no model call, so nothing to cache."""
        return with_extractive_floor(current_run().engine, request, draft)
