"""The four roles a research run needs, one small interface each.

The extractive engine (citeflow/extractive.py) plays every role with no model; model-backed
roles implement the same interfaces. The flow only ever talks to an `Engine`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from citeflow.contracts import ClaimDraft, Critique, Draft, Page, SubQuestion, SynthesisInput


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


class ClaimExtractor(Protocol):
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
    extractor: ClaimExtractor
    synthesiser: Synthesiser
    critic: Critic
