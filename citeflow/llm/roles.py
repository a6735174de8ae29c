"""The model-backed roles, how each degrades, and the engine that wires them (the loop: tasks/writer.py).

Each role implements its protocol from citeflow.roles. When its model cannot give a usable answer
(endpoint down past the retry bound, reply invalid twice, budget reached) the role degrades instead of
failing the run, and records why in a DegradationLog the flow turns into run errors and caveats:
  planner     -> no sub-questions (the plan stage then uses the question itself)
  verifier    -> no claims from that page
  synthesiser -> the fallback (extractive) report
  critic      -> the fallback (mechanical) verdict
A refused request (401, 404, ...) is a configuration error: it is raised, not degraded.
Caps are applied in code, whatever a reply says: by the stage functions in tasks/ (which see every
role's output), and here only where a cap saves a call (the plan is cut before the query writer sees it).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from pydantic import BaseModel

from citeflow.config import Caps
from citeflow.contracts import ClaimDraft, Critique, Draft, Page, SubQuestion, SynthesisInput
from citeflow.llm import prompts
from citeflow.llm.budget import Budget, CallLog
from citeflow.llm.client import EndpointPool, RoleClient
from citeflow.llm.errors import DegradableError
from citeflow.llm.settings import CORE_ROLES, ModelSettings, RoleName
from citeflow.roles import ClaimExtractor, Critic, Engine, Planner, Synthesiser


class Degradation(BaseModel):
    role: str
    subject: str = ""  # what the role was working on: a page URL, "report", ...
    reason: str


class DegradationLog:
    """Thread-safe list of degradations; the flow drains it into run_errors and caveats."""

    def __init__(self) -> None:
        self._items: list[Degradation] = []
        self._lock = threading.Lock()

    def add(self, role: RoleName, subject: str, error: DegradableError) -> None:
        with self._lock:
            self._items.append(Degradation(role=role.value, subject=subject, reason=str(error)))

    def drain(self) -> list[Degradation]:
        with self._lock:
            items, self._items = self._items, []
        return items


class ModelQueryWriter:
    def __init__(self, client: RoleClient, degradations: DegradationLog) -> None:
        self.client = client
        self.degradations = degradations

    def queries(self, question: str, subquestions: list[str]) -> list[str] | None:
        """One search query per sub-question, or None (recorded) when the model gave none usable."""

        def one_each(reply: prompts.QueriesReply) -> None:
            if len(reply.queries) != len(subquestions) or not all(q.strip() for q in reply.queries):
                raise ValueError(
                    f"expected {len(subquestions)} non-empty queries, one per sub-question; "
                    f"got {len(reply.queries)}"
                )

        try:
            reply = self.client.structured(
                prompts.query_messages(question, subquestions), prompts.QueriesReply, one_each
            )
        except DegradableError as exc:
            self.degradations.add(RoleName.query_writer, "queries", exc)
            return None
        return [q.strip() for q in reply.queries]


class ModelPlanner:
    def __init__(
        self,
        client: RoleClient,
        degradations: DegradationLog,
        fewest: int,
        query_writer: ModelQueryWriter | None = None,
        fallback: Planner | None = None,
    ) -> None:
        self.client = client
        self.degradations = degradations
        self.fewest = fewest
        self.query_writer = query_writer
        self.fallback = fallback

    def plan(self, question: str, max_subquestions: int) -> list[SubQuestion]:
        messages = prompts.planner_messages(question, min(self.fewest, max_subquestions), max_subquestions)
        try:
            reply = self.client.structured(messages, prompts.PlanReply)
        except DegradableError as exc:
            self.degradations.add(RoleName.planner, "plan", exc)
            return []  # tasks.planner.enforce_plan makes the question itself the one sub-question
        # Capped before the query writer is asked, so it is not paid for sub-questions the plan drops.
        # Stripping, deduplication and the final numbering are enforce_plan's.
        planned = reply.subquestions[:max_subquestions]
        queries = [p.query for p in planned]
        if self.query_writer is not None:
            queries = self.query_writer.queries(question, [p.text for p in planned]) or queries
        return [
            SubQuestion(id=f"q{n + 1}", position=n, text=p.text, query=query)
            for n, (p, query) in enumerate(zip(planned, queries, strict=True))
        ]

    def follow_up(self, evidence: SynthesisInput, limit: int) -> list[SubQuestion]:
        """Follow-up sub-questions from the model; when it gives none usable, the fallback planner's rules
        (the extractive engine's bridge entities), recorded as a degradation."""
        try:
            reply = self.client.structured(prompts.follow_up_messages(evidence, limit), prompts.FollowUpReply)
        except DegradableError as exc:
            self.degradations.add(RoleName.planner, "follow-up", exc)
            return self.fallback.follow_up(evidence, limit) if self.fallback is not None else []
        # Numbering, deduplication against the plan and the limit are tasks.planner.enforce_follow_ups'.
        return [
            SubQuestion(id=f"f{n}", position=n, text=p.text, query=p.query)
            for n, p in enumerate(reply.subquestions[:limit])
        ]


class ModelVerifier:
    def __init__(self, client: RoleClient, degradations: DegradationLog, page_chars: int) -> None:
        self.client = client
        self.degradations = degradations
        self.page_chars = page_chars

    def extract(self, subquestion: SubQuestion, page: Page, limit: int) -> list[ClaimDraft]:
        messages = prompts.verifier_messages(subquestion, page, limit, self.page_chars)
        try:
            reply = self.client.structured(messages, prompts.ClaimsReply)
        except DegradableError as exc:
            self.degradations.add(RoleName.verifier, page.url, exc)
            return []
        return reply.claims  # tasks.verifier.verify_page caps them at `limit`


class ModelSynthesiser:
    def __init__(self, client: RoleClient, degradations: DegradationLog, fallback: Synthesiser) -> None:
        self.client = client
        self.degradations = degradations
        self.fallback = fallback

    def write(self, request: SynthesisInput) -> Draft:
        if not request.claims:  # nothing verified: there is nothing a model may write from
            return Draft(sentences=[])

        def has_sentences(draft: Draft) -> None:
            if not draft.sentences:
                raise ValueError("the draft has no sentences, but there are verified claims to report")

        try:
            return self.client.structured(prompts.synthesiser_messages(request), Draft, has_sentences)
        except DegradableError as exc:
            self.degradations.add(RoleName.synthesiser, "report", exc)
            return self.fallback.write(request)


class ModelCritic:
    def __init__(self, client: RoleClient, degradations: DegradationLog, fallback: Critic) -> None:
        self.client = client
        self.degradations = degradations
        self.fallback = fallback

    def review(self, request: SynthesisInput, draft: Draft) -> Critique:
        def indices_in_draft(critique: Critique) -> None:
            wrong = [p.index for p in critique.problems if p.index >= len(draft.sentences)]
            if wrong:
                raise ValueError(
                    f"problem index {wrong[0]} is out of range: the draft has {len(draft.sentences)} "
                    f"sentences, numbered 0 to {len(draft.sentences) - 1}"
                )

        try:
            critique = self.client.structured(
                prompts.critic_messages(request, draft), Critique, indices_in_draft
            )
        except DegradableError as exc:
            self.degradations.add(RoleName.critic, "report", exc)
            return self.fallback.review(request, draft)
        # A critique that lists problems is not an approval, whatever its flag says.
        return critique.model_copy(update={"approved": critique.approved and not critique.problems})


@dataclass(frozen=True)
class ModelEngine:
    """What the flow holds: the engine, the run's budget, and the degradations to report."""

    engine: Engine
    budget: Budget
    degradations: DegradationLog


def build_engine(
    settings: ModelSettings,
    log: CallLog,
    run_id: str,
    *,
    caps: Caps,
    fallback: Engine,
    pool: EndpointPool | None = None,
) -> ModelEngine:
    """Model roles where configured, `fallback` (the extractive engine) where not."""
    budget = Budget.for_settings(settings, log, run_id, caps.token_budget)
    degradations = DegradationLog()
    pool = pool or EndpointPool(settings.limits)

    def client(role: RoleName) -> RoleClient | None:
        config = settings.role(role)
        return None if config is None else RoleClient(role, config, pool, budget, log, run_id)

    planner_client = client(RoleName.planner)
    writer_client = client(RoleName.query_writer)
    verifier_client = client(RoleName.verifier)
    synthesiser_client = client(RoleName.synthesiser)
    critic_client = client(RoleName.critic)

    planner: Planner = fallback.planner
    if planner_client is not None:
        writer = ModelQueryWriter(writer_client, degradations) if writer_client is not None else None
        planner = ModelPlanner(planner_client, degradations, caps.subquestions_min, writer, fallback.planner)
    extractor: ClaimExtractor = (
        fallback.extractor
        if verifier_client is None
        else ModelVerifier(verifier_client, degradations, settings.limits.verifier_page_chars)
    )
    synthesiser: Synthesiser = (
        fallback.synthesiser
        if synthesiser_client is None
        else ModelSynthesiser(synthesiser_client, degradations, fallback.synthesiser)
    )
    critic: Critic = (
        fallback.critic
        if critic_client is None
        else ModelCritic(critic_client, degradations, fallback.critic)
    )
    engine = Engine(
        name=_engine_name(settings, fallback.name),
        planner=planner,
        extractor=extractor,
        synthesiser=synthesiser,
        critic=critic,
    )
    return ModelEngine(engine=engine, budget=budget, degradations=degradations)


def _engine_name(settings: ModelSettings, fallback: str) -> str:
    """E.g. "planner=small-model, verifier=strong-model, synthesiser=extractive, critic=strong-model"."""
    if not settings.roles:
        return fallback
    shown = [*CORE_ROLES, *([RoleName.query_writer] if RoleName.query_writer in settings.roles else [])]
    return ", ".join(
        f"{role.value}={settings.roles[role].model if role in settings.roles else fallback}" for role in shown
    )
