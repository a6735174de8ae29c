"""Synthesise and critique: draft, check mechanically, let the critic judge, revise at most N times.

Mechanical checks come first and a critic only sees drafts that pass them. Whatever the critic says,
a sentence that fails a mechanical check after the last revision is removed, never shipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from citeflow.checks import failing_sentences, mechanical_critique
from citeflow.contracts import Critique, Draft, DraftSentence, SynthesisInput
from citeflow.llm.budget import REVISION_SHARE
from citeflow.roles import Engine


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


def write_report(
    engine: Engine, request: SynthesisInput, revisions_max: int, may_revise: Callable[[], bool]
) -> Review:
    """Draft, critique and revise until approved, out of revisions, stuck, or out of budget
    (`may_revise` answers whether a new revision may start)."""
    draft = engine.synthesiser.write(request)
    verdict = critique(engine, request, draft)
    previous: tuple[Draft, Critique] | None = None
    revisions = 0
    while (end := revision_end(verdict, draft, previous, revisions, revisions_max, may_revise)) is None:
        previous = (draft, verdict)
        draft = engine.synthesiser.write(request.model_copy(update={"previous": draft, "critique": verdict}))
        revisions += 1
        verdict = critique(engine, request, draft)
    removed = failing_sentences(draft, mechanical_critique(draft, request.claims))
    return Review(draft, verdict, revisions, end, removed)
