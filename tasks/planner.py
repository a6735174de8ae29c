"""Plan: split the question into sub-questions, with the cap and the numbering enforced here."""

from __future__ import annotations

from citeflow.contracts import SubQuestion, SynthesisInput
from citeflow.roles import Engine
from citeflow.text import normalise
from storage.store import EvidenceStore
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


def plan(
    store: EvidenceStore, engine: Engine, run_id: str, question: str, max_subquestions: int
) -> list[SubQuestion]:
    with traced(store, run_id, "plan", engine.name) as step:
        subquestions = enforce_plan(
            question, engine.planner.plan(question, max_subquestions), max_subquestions
        )
        step.detail = f"{len(subquestions)} sub-questions"
    store.add_subquestions(run_id, subquestions)
    return subquestions


def enforce_follow_ups(
    existing: list[SubQuestion], proposed: list[SubQuestion], limit: int
) -> list[SubQuestion]:
    """Whatever a planner proposed for the second round: drop empty ones and those whose query repeats
    any sub-question's, cap at `limit`, number them on from the plan (q4, q5, ... after q3)."""
    seen = {normalise(sub.query).casefold() for sub in existing}
    kept: list[SubQuestion] = []
    for sub in proposed:
        text, query = sub.text.strip(), (sub.query.strip() or sub.text.strip())
        key = normalise(query).casefold()
        if not text or key in seen or len(kept) == limit:
            continue
        seen.add(key)
        position = len(existing) + len(kept)
        kept.append(SubQuestion(id=f"q{position + 1}", position=position, text=text, query=query))
    return kept


def follow_up(
    store: EvidenceStore,
    engine: Engine,
    run_id: str,
    evidence: SynthesisInput,
    limit: int,
) -> list[SubQuestion]:
    """The second round's sub-questions, from what the first round verified (`evidence`)."""
    if limit < 1:
        return []
    with traced(store, run_id, "follow-up", engine.name) as step:
        proposed = engine.planner.follow_up(evidence, limit)
        followups = enforce_follow_ups(evidence.subquestions, proposed, limit)
        step.detail = f"{len(followups)} follow-up sub-questions"
    store.add_subquestions(run_id, followups)
    return followups
