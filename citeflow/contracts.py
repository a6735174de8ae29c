"""The state schema: every record that passes between stages, and nothing else.

Every stage reads and writes named fields of these models, and the DuckDB tables in
storage/migrations.py mirror them column for column. Change a field here and there together.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator

from citeflow.sanitize import clean_line, clean_text

QUESTION_MAX_CHARS = 2000


class Record(BaseModel):
    """Base of every contract: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class RunStatus(StrEnum):
    running = "running"
    complete = "complete"  # every sub-question has evidence and the critic approved the report
    partial = "partial"  # a report was written, but something failed or is missing (see caveats)
    failed = "failed"  # no useful output was possible, or an error stopped the run; the row says why
    cancelled = "cancelled"  # stopped on purpose: Ctrl-C, SIGTERM, a cancel from Prefect
    crashed = "crashed"  # the process running it died (SIGKILL, power loss); marked by the next citeflow


class ProcessId(Record):
    """The process that runs a run, so another process can tell whether it is still alive."""

    pid: int
    host: str
    started: float = Field(description="The process's start time (epoch seconds): a reused pid differs.")


class Origin(StrEnum):
    ingested = "ingested"  # loaded with `citeflow ingest`
    fetched = "fetched"  # fetched from the web during a run


class ClaimStatus(StrEnum):
    verified = "verified"
    rejected = "rejected"


class SentenceCheck(StrEnum):
    """The mechanical verdict on one report sentence, decided before any model judges it."""

    ok = "ok"
    uncited = "uncited"  # a factual sentence with no citation
    unknown_id = "unknown_id"  # cites an id that is not the source of a verified claim
    unsupported = "unsupported"  # a number or name in it is absent from the quotes it cites


class SentenceStatus(StrEnum):
    kept = "kept"
    removed = "removed"


class Outcome(StrEnum):
    ok = "ok"
    degraded = "degraded"  # the step fell back to a safe default and the run went on
    failed = "failed"
    skipped = "skipped"  # not attempted, e.g. the budget would have been crossed


class Question(Record):
    text: str = Field(description="The research question as one line, without control characters.")

    @field_validator("text")
    @classmethod
    def _not_empty_not_huge(cls, value: str) -> str:
        value = clean_line(value)
        if not value:
            raise ValueError("the question is empty")
        if len(value) > QUESTION_MAX_CHARS:
            raise ValueError(f"the question has {len(value)} characters; the limit is {QUESTION_MAX_CHARS}")
        return value


class SubQuestion(Record):
    id: str = Field(description="Stable within a run: q1, q2, ...")
    position: int = Field(ge=0)
    text: str = Field(description="The sub-question as shown in the report.")
    query: str = Field(description="What the researcher sends to search.")

    # A planner may be a model: what it writes is printed and stored like the question it came from.
    _one_clean_line = field_validator("text", "query")(clean_line)


class PageInput(Record):
    """A page before it is stored: what ingestion or a fetch produces."""

    url: str
    title: str = ""
    text: str
    origin: Origin
    published: str | None = Field(default=None, description="Publication date as the page states it.")

    # Every page enters the store through here, fetched or ingested: clean it once, before it is hashed.
    _clean_title = field_validator("title")(clean_line)
    _clean_text = field_validator("text")(clean_text)


class Page(Record):
    id: str = Field(description="sha256 of canonical URL and content hash, first 16 hex digits.")
    url: str
    canonical_url: str
    title: str
    text: str
    content_hash: str = Field(description="sha256 of text, hex.")
    origin: Origin
    published: str | None = None
    stored_at: datetime = Field(description="When this content was first fetched or ingested.")


class SearchResult(Record):
    url: str
    title: str
    snippet: str
    provider: str
    rank: int = Field(ge=1)
    page_id: str | None = Field(default=None, description="Set when the result is a page already stored.")


class RunSource(Record):
    """A page a run read for one sub-question. source_id is set once a claim from it is verified."""

    run_id: str
    subquestion_id: str
    page_id: str
    provider: str
    rank: int
    source_id: str | None = Field(default=None, description="S1, S2, ... as cited in the report.")


class ClaimDraft(Record):
    """A claim as a role proposes it, before the mechanical check."""

    text: str
    quote: str = Field(description="Must appear in the page text, verbatim up to white space and typography.")


class Claim(Record):
    """A claim checked against its page. It names no run: a verification is cached and reused by every
    run that reads the same page for the same sub-question, and the store files it under each run that
    does (`EvidenceStore.add_claims(run_id, claims)`), as it files sub-questions."""

    id: str = Field(description="C1, C2, ... within a run.")
    subquestion_id: str
    page_id: str
    page_hash: str = Field(description="content_hash of the page version the quote was checked against.")
    text: str
    quote: str
    quote_start: int | None = Field(default=None, description="Offset of the quote in the page text.")
    quote_end: int | None = None
    status: ClaimStatus
    reason: str = Field(default="", description="Why a claim was rejected; empty when verified.")
    source_id: str | None = Field(
        default=None, description="The cited source id, set once sources are numbered."
    )


class Source(Record):
    """A cited page, as the bibliography lists it."""

    id: str
    page_id: str
    url: str
    title: str
    stored_at: datetime


class DraftSentence(Record):
    text: str
    cites: list[str] = Field(default_factory=list, description="Source ids, e.g. ['S1', 'S3'].")
    section: str = Field(
        default="",
        description="Sub-question id the sentence supports; '' for the answer, which the report prints "
        "first. A draft with no '' sentence says the evidence does not answer the question.",
    )


class Draft(Record):
    sentences: list[DraftSentence]


class SynthesisInput(Record):
    """Everything a synthesiser may write from: verified claims only."""

    question: str
    subquestions: list[SubQuestion]
    claims: list[Claim] = Field(description="Verified claims, each with its source_id set.")
    sources: list[Source]
    previous: Draft | None = Field(default=None, description="The draft being revised, if any.")
    critique: Critique | None = Field(default=None, description="The critique of `previous`.")


class SentenceProblem(Record):
    index: int = Field(ge=0, description="Position of the sentence in the draft.")
    check: SentenceCheck
    detail: str = ""


class Critique(Record):
    approved: bool
    notes: str = ""
    problems: list[SentenceProblem] = Field(default_factory=list)


class ReportSentence(Record):
    run_id: str
    position: int
    section: str
    text: str
    cites: list[str]
    status: SentenceStatus
    reason: str = ""
    pages: int = Field(default=0, description="Distinct pages the sentence cites: a finding's corroboration.")


class StageMetrics(Record):
    stage: str
    wall_seconds: float = 0.0
    pages: int = 0
    claims_verified: int = 0
    claims_rejected: int = 0
    sentences_removed: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    degradations: int = Field(
        default=0, description="Outputs of this stage's roles replaced by the extractive engine's."
    )


class RunMetrics(Record):
    stages: list[StageMetrics] = Field(default_factory=list)
    wall_seconds: float = 0.0
    model_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    degradations: int = Field(default=0, description="Fallbacks to the extractive engine, all stages.")


class ModelCall(Record):
    run_id: str
    role: str
    model: str
    endpoint: str
    prompt_tokens: int
    completion_tokens: int
    tokens_estimated: bool = Field(description="True when the server sent no usage figures.")
    latency_seconds: float
    attempt: int
    outcome: Outcome
    prompt_hash: str
    detail: str = ""
    prompt: str = Field(
        default="", description="The messages sent, as 'role: content' blocks; capped, empty when not stored."
    )
    reply: str = Field(default="", description="The reply text as received; capped, empty when not stored.")


class Trace(Record):
    run_id: str
    stage: str
    subquestion_id: str | None = None
    actor: str = Field(description="The tool or role that did the step: 'local-search', 'extractive', ...")
    started_at: datetime
    ended_at: datetime
    outcome: Outcome
    detail: str = ""


class RunError(Record):
    run_id: str
    stage: str
    detail: str
    subquestion_id: str | None = None


class Report(Record):
    """What a run returns: the finished report and everything needed to check it."""

    run_id: str
    question: str
    status: RunStatus
    answered: bool = Field(
        description="Whether the report opens with a cited answer; False when the verified evidence does "
        "not answer the question (the report then says so first and cites what it found as related)."
    )
    kind: str = Field(
        default="answer",
        description="'answer' (one fact: the answer first) or 'digest' (an open question: every distinct "
        "finding, citing every page that states it), chosen from the question (citeflow/extractive/kind.py).",
    )
    markdown: str
    report_path: str | None = None
    sources: list[Source]
    claims: list[Claim] = Field(description="The verified claims.")
    sentences: list[ReportSentence] = Field(description="The kept sentences, in order.")
    caveats: list[str]
    metrics: RunMetrics
