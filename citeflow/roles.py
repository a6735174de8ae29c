"""The four roles a research run needs, one small interface each.

The extractive engine (citeflow/extractive/engine.py) plays every role with no model; model-backed
roles implement the same interfaces. The flow only ever talks to an `Engine`.

A model-backed role that cannot give a usable answer raises citeflow.llm.errors.DegradableError; the
stage functions in tasks/ then ask the engine's `fallback` (the extractive engine) for that one call,
and record a Degradation. The same stages also fall back when a usable reply is useless: a page whose
claims all fail the checks, a plan with no sub-question about the question, a draft whose every
sentence fails the checks.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel, Field

from citeflow.contracts import ClaimDraft, Critique, Draft, Page, SubQuestion, SynthesisInput

# A caveat line is at most this long: it is read in a list, not studied.
CAVEAT_MAX_CHARS = 200
# The error row of a fallback has the stage it happened in plus this ("verify:fallback"): the report's
# caveats say it once per role (`degradation_caveats`), not once per row.
FALLBACK_STAGE_SUFFIX = ":fallback"


class Degradation(BaseModel):
    """One call whose output the extractive engine's replaced (or, for the query writer, the planner's
    own queries): the full reason goes to the run's error rows, `short` to the report's caveats."""

    role: str
    subject: str = Field(default="", description="What the role was working on: a page URL, 'plan', ...")
    reason: str = Field(description="The full error or finding, for the run's error rows.")
    short: str = Field(
        max_length=CAVEAT_MAX_CHARS, description="One line written by citeflow, never by a model."
    )
    transient: bool = Field(
        default=False,
        description="Caused by something that may pass by the next run (an endpoint down, the budget "
        "spent), not by what the model replied: a result holding it is not cached.",
    )


# The degradations added by the code running in this context (a task's thread), when someone watches.
_watching: ContextVar[list[Degradation] | None] = ContextVar("citeflow_degradations", default=None)


class DegradationLog:
    """Thread-safe list of degradations; the flow drains it after each stage into error rows, metrics
    and caveats."""

    def __init__(self) -> None:
        self._items: list[Degradation] = []
        self._lock = threading.Lock()

    def add(self, role: str, subject: str, reason: str, short: str, transient: bool = False) -> None:
        """One fallback: to the block watching this context if there is one (a task, whose result then
        carries it), else to the log the flow drains."""
        if len(short) > CAVEAT_MAX_CHARS:
            short = short[: CAVEAT_MAX_CHARS - 3] + "..."
        item = Degradation(role=role, subject=subject, reason=reason, short=short, transient=transient)
        seen = _watching.get()
        if seen is not None:
            seen.append(item)
            return
        with self._lock:
            self._items.append(item)

    @contextmanager
    def watch(self) -> Iterator[list[Degradation]]:
        """The degradations added by code running inside the block in this context, kept out of the
        log: stages run their roles in the calling thread, so a task owns its own fallbacks and returns
        them with its result (cached together)."""
        seen: list[Degradation] = []
        token = _watching.set(seen)
        try:
            yield seen
        finally:
            _watching.reset(token)

    def drain(self) -> list[Degradation]:
        with self._lock:
            items, self._items = self._items, []
        return items


def degradation_caveats(degradations: list[Degradation]) -> list[str]:
    """One caveat line per role that fell back: its one fallback's line, or the first of several with
    how many there were."""
    by_role: dict[str, list[Degradation]] = {}
    for degradation in degradations:
        by_role.setdefault(degradation.role, []).append(degradation)
    lines = []
    for role, items in by_role.items():
        if len(items) == 1:
            lines.append(items[0].short)
            continue
        line = f"The {role} fell back {len(items)} times; the first: {items[0].short}"
        lines.append(line if len(line) <= CAVEAT_MAX_CHARS else line[: CAVEAT_MAX_CHARS - 3] + "...")
    return lines


class Planner(Protocol):
    def plan(self, question: str, max_subquestions: int) -> list[SubQuestion]:
        """Split the question into at most `max_subquestions` sub-questions (ids q1, q2, ...)."""
        ...

    def follow_up(self, evidence: SynthesisInput, limit: int) -> list[SubQuestion]:
        """At most `limit` sub-questions for a second research round, about what the verified claims of
        the first (`evidence`) lead to that the question still needs: "born in Hiroshima" leads to a
        sub-question about Hiroshima when the question asks about the birthplace. tasks/planner.py
        numbers them and enforces the limit."""
        ...


class ClaimVerifier(Protocol):
    def extract(self, subquestion: SubQuestion, page: Page, limit: int) -> list[ClaimDraft]:
        """Propose claims from one page, each with the exact supporting quote; `limit` is how many the
        caller will keep (tasks/verifier.py enforces it)."""
        ...


class Synthesiser(Protocol):
    def write(self, request: SynthesisInput) -> Draft:
        """Write a report draft from verified claims only, citing their source ids."""
        ...


class Critic(Protocol):
    def review(self, request: SynthesisInput, draft: Draft) -> Critique:
        """Judge a draft that already passed the mechanical checks."""
        ...


@dataclass(frozen=True)
class Engine:
    name: str  # shown in the report: "extractive", or the models that played each role
    planner: Planner
    verifier: ClaimVerifier
    synthesiser: Synthesiser
    critic: Critic
    # The engine each stage falls back to for one call; None when this engine is that fallback.
    fallback: Engine | None = None
    degradations: DegradationLog = field(default_factory=DegradationLog)
    # Page text per verifier call: longer pages are read in windows (tasks/verifier.py), at most
    # `windows_max` of them. None: the whole page in one call.
    window_chars: int | None = None
    windows_max: int = 1

    def fallback_for(self, role: str) -> Engine | None:
        """The engine to fall back to for `role` ("planner", "verifier", "synthesiser", "critic"): the
        fallback, unless it already plays that role here (a role with no model of its own), when falling
        back, topping up or flooring with it would only repeat the same work and blame a model."""
        if self.fallback is None or getattr(self, role) is getattr(self.fallback, role):
            return None
        return self.fallback
