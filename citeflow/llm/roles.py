"""The model-backed roles and the engine that wires them (the loop: tasks/writer.py).

Each role implements its protocol from citeflow.roles. When its model cannot give a usable answer
(endpoint down past the retry bound, reply invalid twice, budget reached, prompt too big for the
context window) the role raises DegradableError, and the stage function in tasks/ falls back to the
extractive engine for that one call and records why. The query writer is the exception: the planner's
own queries stand in for it, so the planner records its degradation. A refused request (401, 404, ...)
is a configuration error: it is raised to the flow, not degraded.
Caps are applied in code, whatever a reply says: by the stage functions in tasks/ (which see every
role's output), and here only where a cap saves a call (the plan is cut before the query writer sees it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from citeflow.config import Caps
from citeflow.contracts import ClaimDraft, Critique, Draft, DraftSentence, Page, SubQuestion, SynthesisInput
from citeflow.extractive.kind import ReportKind, report_kind
from citeflow.llm import prompts
from citeflow.llm.budget import CONTEXT_CHARS_PER_TOKEN, Budget, CallLog
from citeflow.llm.client import EndpointPool, RoleClient
from citeflow.llm.digest import ModelDigestWriter
from citeflow.llm.errors import DegradableError
from citeflow.llm.settings import CORE_ROLES, ModelSettings, RoleConfig, RoleName
from citeflow.roles import DegradationLog, Engine
from citeflow.text import content_stems, normalise

# A planned sub-question most of whose words come from the planner's own instructions, and not from
# the question, was lifted from the prompt ("Read it as evidence only: ...").
LIFTED_MIN_SHARE = 0.5
# Characters of a prompt kept free of page text or claims for the model's reply format and slack.
PROMPT_SLACK_CHARS = 400
_CITE = re.compile(r"\[?\s*(S\d+)\s*\]?", re.IGNORECASE)
_INLINE_CITE = re.compile(r"\[\s*(S\d+)\s*\]", re.IGNORECASE)
_SECTION_MARK = re.compile(r"\(\s*section\s+(?:q\d+|summary)\s*\)", re.IGNORECASE)


def prompt_chars(config: RoleConfig) -> int:
    """Characters a role's prompt may hold so that it and the longest reply fit its context window."""
    return max(0, (config.context_tokens - config.max_output_tokens) * CONTEXT_CHARS_PER_TOKEN)


def is_lifted(text: str, question: str, instructions: str) -> bool:
    """Whether a sub-question's words come mostly from the instructions rather than the question."""
    own = set(content_stems(text))
    borrowed = own & set(content_stems(instructions)) - set(content_stems(question))
    return bool(own) and len(borrowed) >= LIFTED_MIN_SHARE * len(own)


class ModelQueryWriter:
    def __init__(self, client: RoleClient, degradations: DegradationLog) -> None:
        self.client = client
        self.degradations = degradations

    def queries(self, question: str, subquestions: list[str]) -> list[str] | None:
        """One search query per sub-question (extra ones cut), or None (recorded) when the model gave
        none usable: the planner's own queries then stand."""

        def one_each(reply: prompts.QueriesReply) -> None:
            given = reply.queries[: len(subquestions)]
            if len(given) < len(subquestions) or not all(q.strip() for q in given):
                raise ValueError(
                    f"expected {len(subquestions)} non-empty queries, one per sub-question; "
                    f"got {len(reply.queries)}"
                )

        try:
            reply = self.client.structured(
                prompts.query_messages(question, subquestions), prompts.QueriesReply, one_each
            )
        except DegradableError as exc:
            self.degradations.add(
                RoleName.query_writer.value,
                "queries",
                str(exc),
                "The query writer's reply was unusable; the planner's own search queries were used.",
                transient=exc.transient,
            )
            return None
        return [q.strip() for q in reply.queries[: len(subquestions)]]


class ModelPlanner:
    def __init__(self, client: RoleClient, fewest: int, query_writer: ModelQueryWriter | None = None) -> None:
        self.client = client
        self.fewest = fewest
        self.query_writer = query_writer

    def plan(self, question: str, max_subquestions: int) -> list[SubQuestion]:
        """The model's sub-questions beside the question itself (which tasks/planner.py always puts
        first), minus any lifted from the prompt's instructions; DegradableError when the reply was
        unusable. What is left may be fewer than the minimum: the stage fills the plan up."""
        # The question is researched as q1 whatever the plan, so the model is asked for the others.
        most = max(max_subquestions - 1, 1)
        fewest = min(max(self.fewest - 1, 1), most)
        messages = prompts.planner_messages(question, fewest, most)
        reply = self.client.structured(messages, prompts.PlanReply)
        instructions = messages[0]["content"]
        planned = [
            p for p in reply.subquestions if not is_lifted(f"{p.text} {p.query}", question, instructions)
        ]
        # Capped before the query writer is asked, so it is not paid for sub-questions the plan drops.
        # Stripping, deduplication and the final numbering are enforce_plan's.
        planned = planned[:most]
        queries = [p.query or p.text for p in planned]
        if self.query_writer is not None:
            queries = self.query_writer.queries(question, [p.text for p in planned]) or queries
        return [
            SubQuestion(id=f"q{n + 1}", position=n, text=p.text, query=query)
            for n, (p, query) in enumerate(zip(planned, queries, strict=True))
        ]

    def follow_up(self, evidence: SynthesisInput, limit: int) -> list[SubQuestion]:
        """The model's follow-up sub-questions; DegradableError when the reply was unusable (the stage,
        tasks/planner.py, then asks the fallback planner's rules)."""
        messages = prompts.follow_up_messages(evidence, limit, prompt_chars(self.client.config))
        reply = self.client.structured(messages, prompts.FollowUpReply)
        # Numbering, deduplication against the plan and the limit are tasks.planner.enforce_follow_ups'.
        return [
            SubQuestion(id=f"f{n}", position=n, text=p.text, query=p.query)
            for n, p in enumerate(reply.subquestions[:limit])
        ]


class ModelVerifier:
    def __init__(self, client: RoleClient, page_chars: int) -> None:
        self.client = client
        self.page_chars = page_chars

    def window_chars(self) -> int:
        """Page text one call can show: the setting, or less when the context window needs it."""
        fixed = prompts.verifier_fixed_chars() + PROMPT_SLACK_CHARS
        return max(500, min(self.page_chars, prompt_chars(self.client.config) - fixed))

    def extract(self, subquestion: SubQuestion, page: Page, limit: int) -> list[ClaimDraft]:
        messages = prompts.verifier_messages(subquestion, page, limit, self.page_chars)
        reply = self.client.structured(messages, prompts.ClaimsReply)
        return reply.claims  # tasks.verifier.verify_page caps them at `limit`


def _cites(sentence_cites: list[str]) -> list[str]:
    """Source ids as the checks compare them: "[S1]" and "s1" are S1; anything else stays as written,
    for the checks to reject."""
    return [m.group(1).upper() if (m := _CITE.fullmatch(cite.strip())) else cite for cite in sentence_cites]


def _as_written(sentence: DraftSentence) -> DraftSentence:
    """The sentence without the markers a model copies from the numbered draft it was shown ("[S1]",
    "(section q2)"): an id in the text is a citation, so it moves to `cites`; the rest is format."""
    in_text = [m.group(1).upper() for m in _INLINE_CITE.finditer(sentence.text)]
    text = _SECTION_MARK.sub(" ", _INLINE_CITE.sub(" ", sentence.text))
    text = re.sub(r"\s+([.,;:!?])", r"\1", " ".join(text.split()))
    cites = list(dict.fromkeys(_cites(sentence.cites) + in_text))
    return sentence.model_copy(update={"text": text, "cites": cites})


def _with_summary(request: SynthesisInput, draft: Draft) -> Draft:
    """The draft, its sentences answering the question's own sub-question (q1 is the question itself)
    moved to the summary when the model wrote none there: small models file the answer under q1."""
    if any(sentence.section == "" for sentence in draft.sentences):
        return draft
    asked = normalise(request.question).casefold()
    own = {sub.id for sub in request.subquestions if normalise(sub.text).casefold() == asked}
    return Draft(
        sentences=[
            sentence.model_copy(update={"section": ""}) if sentence.section in own else sentence
            for sentence in draft.sentences
        ]
    )


class ModelSynthesiser:
    def __init__(self, client: RoleClient, findings_max: int = Caps().report_findings_max) -> None:
        self.client = client
        self.findings_max = findings_max

    def write(self, request: SynthesisInput) -> Draft:
        if not request.claims:  # nothing verified: there is nothing a model may write from
            return Draft(sentences=[])
        if report_kind(request.question) is ReportKind.digest:
            chars = prompt_chars(self.client.config)
            return ModelDigestWriter(self.client, self.findings_max, chars).write(request)

        def has_sentences(draft: Draft) -> None:
            if not draft.sentences:
                raise ValueError("the draft has no sentences, but there are verified claims to report")

        messages = prompts.synthesiser_messages(request, prompt_chars(self.client.config))
        draft = self.client.structured(messages, Draft, has_sentences)
        return _with_summary(request, Draft(sentences=[_as_written(s) for s in draft.sentences]))


class ModelCritic:
    def __init__(self, client: RoleClient) -> None:
        self.client = client

    def review(self, request: SynthesisInput, draft: Draft) -> Critique:
        def indices_in_draft(critique: Critique) -> None:
            wrong = [p.index for p in critique.problems if p.index >= len(draft.sentences)]
            if wrong:
                raise ValueError(
                    f"problem index {wrong[0]} is out of range: the draft has {len(draft.sentences)} "
                    f"sentences, numbered 0 to {len(draft.sentences) - 1}"
                )

        messages = prompts.critic_messages(request, draft, prompt_chars(self.client.config))
        critique = self.client.structured(messages, Critique, indices_in_draft)
        # A critique that lists problems is not an approval, whatever its flag says.
        return critique.model_copy(update={"approved": critique.approved and not critique.problems})


@dataclass(frozen=True)
class ModelEngine:
    """What the flow holds: the engine (with its fallback and degradation log) and the run's budget."""

    engine: Engine
    budget: Budget

    @property
    def degradations(self) -> DegradationLog:
        return self.engine.degradations


def build_engine(
    settings: ModelSettings,
    log: CallLog,
    run_id: str,
    *,
    caps: Caps,
    fallback: Engine,
    pool: EndpointPool | None = None,
) -> ModelEngine:
    """Model roles where configured, `fallback` (the extractive engine) where not and for every call a
    model role cannot answer usefully."""
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

    verifier = (
        None
        if verifier_client is None
        else ModelVerifier(verifier_client, settings.limits.verifier_page_chars)
    )
    writer = ModelQueryWriter(writer_client, degradations) if writer_client is not None else None
    engine = Engine(
        name=_engine_name(settings, fallback.name),
        planner=fallback.planner
        if planner_client is None
        else ModelPlanner(planner_client, caps.subquestions_min, writer),
        verifier=fallback.verifier if verifier is None else verifier,
        synthesiser=fallback.synthesiser
        if synthesiser_client is None
        else ModelSynthesiser(synthesiser_client, caps.report_findings_max),
        critic=fallback.critic if critic_client is None else ModelCritic(critic_client),
        fallback=fallback if settings.roles else None,
        degradations=degradations,
        window_chars=None if verifier is None else verifier.window_chars(),
        windows_max=settings.limits.verifier_windows_max,
    )
    return ModelEngine(engine=engine, budget=budget)


def _engine_name(settings: ModelSettings, fallback: str) -> str:
    """E.g. "planner=small-model, verifier=strong-model, synthesiser=extractive, critic=strong-model"."""
    if not settings.roles:
        return fallback
    shown = [*CORE_ROLES, *([RoleName.query_writer] if RoleName.query_writer in settings.roles else [])]
    return ", ".join(
        f"{role.value}={settings.roles[role].model if role in settings.roles else fallback}" for role in shown
    )
