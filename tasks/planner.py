"""Plan: split the question into sub-questions, with the cap and the numbering enforced here."""

from __future__ import annotations

from citeflow.contracts import SubQuestion
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
