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
