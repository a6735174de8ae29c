"""Synthesise and critique: draft, check mechanically, let the critic judge, revise at most N times.

Mechanical checks come first and a model critic only sees drafts that pass them. Whatever the critic
says, a sentence that fails a mechanical check after the last revision is removed, never shipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from citeflow.checks import mechanical_critique
from citeflow.contracts import Critique, Draft, DraftSentence, SynthesisInput
from citeflow.roles import Engine


@dataclass
class Review:
    draft: Draft
    critique: Critique
    revisions: int
    removed: dict[int, str]  # position in the draft -> why the sentence failed the mechanical checks
    stopped_because: str = ""  # why the loop ended before approval, for the caveats

    @property
    def kept(self) -> list[DraftSentence]:
        return [
            sentence for position, sentence in enumerate(self.draft.sentences) if position not in self.removed
        ]


def critique(engine: Engine, request: SynthesisInput, draft: Draft) -> Critique:
    """The mechanical verdict, and the critic's only when the mechanical checks pass."""
    mechanical = mechanical_critique(draft, request.claims)
    if not mechanical.approved:
        return mechanical
    return engine.critic.review(request, draft)


def write_report(engine: Engine, request: SynthesisInput, revisions_max: int) -> Review:
    draft = engine.synthesiser.write(request)
    verdict = critique(engine, request, draft)
    revisions, stopped_because = 0, ""
    while not verdict.approved:
        if revisions == revisions_max:
            stopped_because = f"the critic did not approve the draft after {revisions} revision(s)"
            break
        revised = engine.synthesiser.write(
            request.model_copy(update={"previous": draft, "critique": verdict})
        )
        revisions += 1
        revised_verdict = critique(engine, request, revised)
        if revised == draft or revised_verdict == verdict:
            stopped_because = "a revision made no progress on the critique"
            draft, verdict = revised, revised_verdict
            break
        draft, verdict = revised, revised_verdict
    final = mechanical_critique(draft, request.claims)
    removed = {problem.index: f"{problem.check.value}: {problem.detail}" for problem in final.problems}
    return Review(draft, verdict, revisions, removed, stopped_because)
