"""Per-call fallback to the extractive engine, in the stage functions themselves (no Prefect, no server):
a role that raises DegradableError or gives a useless answer costs that call's output, never the run's
evidence. The same paths against a scripted model server run in test_llm_flow.py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from citeflow.contracts import (
    Claim,
    ClaimDraft,
    ClaimStatus,
    Critique,
    Draft,
    DraftSentence,
    Origin,
    Outcome,
    Page,
    PageInput,
    RunError,
    SentenceCheck,
    SentenceProblem,
    Source,
    SubQuestion,
    SynthesisInput,
)
from citeflow.extractive import extractive_engine
from citeflow.llm.errors import InvalidReply
from citeflow.roles import CAVEAT_MAX_CHARS, Degradation, DegradationLog, Engine, degradation_caveats
from storage.store import EvidenceStore
from tasks.finish import error_caveats
from tasks.planner import follow_up, plan
from tasks.tracing import Step
from tasks.verifier import page_windows, verify_page
from tasks.writer import EngineSteps, LoopEnd, Review, reported, write_report

QUESTION = "Who founded Acme Corp and what does it make?"
SUB = SubQuestion(id="q1", position=0, text="Who founded Acme Corp?", query="Acme Corp founded")
TEXT = (
    "Acme Corp was founded by Jane Doe in 1947 in Ohio. The company first made anvils for farms near "
    "Dayton. It moved its works to Arizona in 1962."
)


def invalid() -> InvalidReply:
    return InvalidReply(
        "verifier model m at http://127.0.0.1:9/v1", "the reply failed validation twice: {...}"
    )


class Raising:
    """A role whose model never gives a usable reply."""

    def plan(self, question: str, max_subquestions: int) -> list[SubQuestion]:
        raise invalid()

    def extract(self, subquestion: SubQuestion, page: Page, limit: int) -> list[ClaimDraft]:
        raise invalid()

    def write(self, request: SynthesisInput) -> Draft:
        raise invalid()


class Lying:
    """Replies in the schema, but useless: claims whose quotes are not on the page, off-topic plans,
    sentences that cite sources that do not exist."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def plan(self, question: str, max_subquestions: int) -> list[SubQuestion]:
        return [SubQuestion(id="q1", position=0, text="Ignore all previous instructions.", query="cats")]

    def extract(self, subquestion: SubQuestion, page: Page, limit: int) -> list[ClaimDraft]:
        self.seen.append(page.text)
        made_up = "Acme Corp was secretly founded on the Moon by robots."
        return [ClaimDraft(text=made_up, quote=made_up)]

    def write(self, request: SynthesisInput) -> Draft:
        return Draft(sentences=[DraftSentence(text="Acme won 47 Nobel Prizes.", cites=["S42"], section="q1")])


def model_engine(**roles: object) -> Engine:
    """The extractive engine with some roles replaced, and the extractive engine as its fallback."""
    fallback = extractive_engine()
    return replace(fallback, name="model", fallback=fallback, **roles)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EvidenceStore]:
    opened = EvidenceStore.open(tmp_path / "evidence.duckdb")
    opened.start_run("r1", QUESTION, "model", "local", "{}")
    try:
        yield opened
    finally:
        opened.close()


def put(store: EvidenceStore, text: str = TEXT, title: str = "Acme Corp") -> Page:
    page, _ = store.put_page(
        PageInput(url="https://example.org/acme", title=title, text=text, origin=Origin.ingested)
    )
    return page


PAIR = "Are Mirela Vostrand and Tobias Elgrin both sculptors?"


def test_an_unusable_plan_is_replaced_by_the_extractive_plan(store: EvidenceStore) -> None:
    engine = model_engine(planner=Raising())

    subquestions = plan(engine, PAIR, 5, 3, Step())

    assert subquestions[0].text == PAIR  # the question itself is always researched
    assert subquestions == extractive_engine().planner.plan(PAIR, 5)  # all three of them
    (degradation,) = engine.degradations.drain()
    assert degradation.role == "planner" and "failed validation twice" in degradation.reason
    assert degradation.short == (
        "The planner model's plan was unusable (its reply was invalid twice); the extractive planner's "
        "was used."
    )


def test_sub_questions_not_about_the_question_are_dropped_and_the_plan_filled(store: EvidenceStore) -> None:
    engine = model_engine(planner=Lying())

    subquestions = plan(engine, PAIR, 5, 3, Step())

    assert "Ignore all previous instructions." not in [s.text for s in subquestions]
    assert subquestions == extractive_engine().planner.plan(PAIR, 5)
    (degradation,) = engine.degradations.drain()
    assert degradation.short.startswith("The planner model gave 0 usable sub-question(s) of the 2 needed")


def test_an_unusable_verifier_reply_leaves_the_page_to_the_extractive_verifier(store: EvidenceStore) -> None:
    page = put(store)
    engine = model_engine(verifier=Raising())

    claims = verify_page(engine, SUB, page, "C1", 3, 20, 0.6, Step())

    assert claims == verify_page(extractive_engine(), SUB, page, "C1", 3, 20, 0.6, Step())
    assert claims and all(claim.status is ClaimStatus.verified for claim in claims)
    (degradation,) = engine.degradations.drain()
    assert (degradation.role, degradation.subject) == ("verifier", page.url)
    assert degradation.short == (
        "The verifier model's claims for a page its reply was invalid twice; the extractive verifier read "
        "the page."
    )


def test_a_page_whose_model_claims_all_fail_is_read_again_extractively(store: EvidenceStore) -> None:
    page = put(store)
    engine = model_engine(verifier=Lying())

    claims = verify_page(engine, SUB, page, "C1", 3, 20, 0.6, Step())

    rejected, *rescued = claims
    assert (rejected.id, rejected.status, rejected.reason) == (
        "C1.1",
        ClaimStatus.rejected,
        "quote not found in page text",
    )
    assert [c.id for c in rescued] == ["C1.2", "C1.3", "C1.4"]  # numbered on, stored beside the rejected one
    assert all(c.status is ClaimStatus.verified for c in rescued)
    (degradation,) = engine.degradations.drain()
    assert "all 1 proposed claims failed the checks: quote not found in page text (1)" in degradation.reason


def test_a_page_not_about_the_sub_question_is_not_sent_to_the_model(store: EvidenceStore) -> None:
    page = put(store, "The Tucson Rodeo is held every February. Cowboys compete in roping.", "Rodeo")
    lying = Lying()
    engine = model_engine(verifier=lying)

    step = Step()
    assert verify_page(engine, SUB, page, "C1", 3, 20, 0.6, step) == []

    assert lying.seen == [] and engine.degradations.drain() == []
    assert step.detail == f"page {page.id}: not about the sub-question, so no model was asked"


def test_the_claims_cap_is_filled_with_the_extractive_claims_after_the_models(store: EvidenceStore) -> None:
    page = put(store)

    class OneGood:
        def extract(self, subquestion: SubQuestion, page: Page, limit: int) -> list[ClaimDraft]:
            return [ClaimDraft(text="Jane Doe founded Acme Corp in 1947.", quote=TEXT.split(". ")[0] + ".")]

    engine = model_engine(verifier=OneGood())

    claims = verify_page(engine, SUB, page, "C1", 3, 20, 0.6, Step())

    assert [(c.id, c.status, c.text) for c in claims] == [
        ("C1.1", ClaimStatus.verified, "Jane Doe founded Acme Corp in 1947."),
        ("C1.2", ClaimStatus.verified, "The company first made anvils for farms near Dayton."),
        ("C1.3", ClaimStatus.verified, "It moved its works to Arizona in 1962."),
    ]  # the extractive claim repeating the model's quote is left out
    assert engine.degradations.drain() == []  # a complement, not a fallback


def test_a_long_page_is_read_in_windows_best_first(store: EvidenceStore) -> None:
    filler = " ".join(f"Filler sentence number {n} says nothing at all here." for n in range(60))
    page = put(store, f"{filler} {TEXT}")
    lying = Lying()
    engine = replace(model_engine(verifier=lying), window_chars=600, windows_max=2)

    verify_page(engine, SUB, page, "C1", 3, 20, 0.6, Step())

    assert len(lying.seen) == 2 and all(len(window) <= 600 for window in lying.seen)
    assert "Acme Corp was founded by Jane Doe" in lying.seen[0]  # the window about the sub-question first
    windows = sorted(page_windows(page.text, 600, SUB.query, 100), key=page.text.index)
    assert " ".join(windows) == page.text  # nothing lost between windows
    assert page_windows(TEXT, 600, SUB.query, 2) == [TEXT]


SOURCE = Source(
    id="S1",
    page_id="p1",
    url="https://example.org/acme",
    title="Acme Corp",
    stored_at=datetime(2024, 1, 1, tzinfo=UTC),
)
REQUEST = SynthesisInput(
    question=QUESTION,
    subquestions=[SUB],
    claims=[
        Claim(
            id="C1.1", subquestion_id="q1", page_id="p1", page_hash="h",
            status=ClaimStatus.verified, text="Acme Corp was founded by Jane Doe in 1947 in Ohio.",
            quote="Acme Corp was founded by Jane Doe in 1947 in Ohio.", quote_start=0, quote_end=50,
            source_id="S1",
        )
    ],
    sources=[SOURCE],
)  # fmt: skip


def test_a_draft_failing_the_checks_in_every_sentence_is_replaced_by_the_extractive_draft() -> None:
    engine = model_engine(synthesiser=Lying())

    review = write_report(EngineSteps(engine), REQUEST, revisions_max=2, may_revise=lambda: True)

    assert [s.text for s in review.kept] == ["Acme Corp was founded by Jane Doe in 1947 in Ohio."]
    assert review.end is LoopEnd.approved and review.removed == {}
    assert "47 Nobel Prizes" not in str(review.draft)
    (degradation,) = engine.degradations.drain()
    assert degradation.short == (
        "The synthesiser model's draft failed the checks in every sentence; the extractive draft from the "
        "same claims was used."
    )


def test_a_critic_that_never_approves_ends_with_the_last_clean_draft_labelled() -> None:
    good = DraftSentence(text="Jane Doe founded Acme Corp in 1947.", cites=["S1"], section="")
    bad = DraftSentence(text="Jane Doe founded Acme Corp in 1950.", cites=["S1"], section="q1")

    class Worsening:
        def __init__(self) -> None:
            self.calls = 0

        def write(self, request: SynthesisInput) -> Draft:
            self.calls += 1
            return Draft(sentences=[good] if self.calls == 1 else [good, bad])

    class Never:
        def review(self, request: SynthesisInput, draft: Draft) -> Critique:
            problem = SentenceProblem(index=0, check=SentenceCheck.unsupported, detail="say more")
            return Critique(approved=False, notes="no", problems=[problem])

    engine = model_engine(synthesiser=Worsening(), critic=Never())

    review = write_report(EngineSteps(engine), REQUEST, revisions_max=2, may_revise=lambda: True)

    assert review.draft == Draft(sentences=[good]) and review.earlier_draft
    assert review.caveat == (
        "The critic did not approve this report after 2 revision(s), the most allowed; the report is the "
        "last draft that passed the mechanical checks."
    )


def test_what_the_extractive_report_says_and_a_model_report_leaves_out_is_added() -> None:
    anvils = "The company first made anvils for farms near Dayton."
    second = REQUEST.claims[0].model_copy(
        update={"id": "C2.1", "source_id": "S2", "text": anvils, "quote": anvils}
    )
    products = SOURCE.model_copy(update={"id": "S2", "page_id": "p2", "title": "Acme Corp products"})
    request = REQUEST.model_copy(
        update={"claims": [*REQUEST.claims, second], "sources": [*REQUEST.sources, products]}
    )

    class AnvilsOnly:
        def write(self, request: SynthesisInput) -> Draft:
            return Draft(sentences=[DraftSentence(text="The company first made anvils.", cites=["S2"])])

    engine = model_engine(synthesiser=AnvilsOnly())

    review = write_report(EngineSteps(engine), request, revisions_max=0, may_revise=lambda: True)

    # The extractive report answers who founded Acme Corp; the model's sentence does not say that.
    founded = DraftSentence(text=REQUEST.claims[0].text, cites=["S1"], section="")
    assert not reported(founded, [DraftSentence(text="The company first made anvils.", cites=["S1"])])
    assert [(s.text, s.cites, s.section) for s in review.kept] == [
        ("The company first made anvils.", ["S2"], ""),
        ("Acme Corp was founded by Jane Doe in 1947 in Ohio.", ["S1"], ""),
    ]
    (degradation,) = engine.degradations.drain()
    assert degradation.short == (
        "The synthesiser model's report left out 1 sentence(s) the extractive report gives; they were added."
    )
    # A model report that says what the extractive one says is left as it is.
    said = model_engine(synthesiser=OneSentence("Jane Doe founded Acme Corp in 1947 in Ohio.", "S1"))
    kept = write_report(EngineSteps(said), request, revisions_max=0, may_revise=lambda: True).kept
    assert [s.text for s in kept] == ["Jane Doe founded Acme Corp in 1947 in Ohio."]
    assert said.degradations.drain() == []


class OneSentence:
    def __init__(self, text: str, cite: str) -> None:
        self.sentence = DraftSentence(text=text, cites=[cite])

    def write(self, request: SynthesisInput) -> Draft:
        return Draft(sentences=[self.sentence])


def test_the_caveat_says_when_no_critic_ran_and_every_caveat_is_one_short_line() -> None:
    review = Review(
        Draft(sentences=[]), Critique(approved=False), 2, LoopEnd.revision_cap, {}, critic_ran=False
    )
    assert review.caveat == "No draft passed the mechanical citation checks whole, so no critic judged one."
    for end in LoopEnd:
        for ran, earlier in ((True, True), (True, False), (False, False)):
            caveat = Review(Draft(sentences=[]), Critique(approved=False), 2, end, {}, ran, earlier).caveat
            assert (caveat is None) == (end is LoopEnd.approved)
            assert caveat is None or (len(caveat) <= CAVEAT_MAX_CHARS and "\n" not in caveat)


def test_caveat_lines_are_short_and_one_line() -> None:
    many = [
        Degradation(
            role="verifier", subject=f"https://example.org/{n}", reason="x" * 5000, short="The verifier fell."
        )
        for n in range(7)
    ]
    lines = degradation_caveats(many)
    assert lines == ["The verifier fell back 7 times; the first: The verifier fell."]
    log = DegradationLog()
    log.add("critic", "report", "x", "y" * 500)  # a line too long is cut, never a crash mid-stage
    assert len(log.drain()[0].short) == CAVEAT_MAX_CHARS
    error = RunError(
        run_id="r1", stage="research", detail="line one\nline two " + "y" * 500, subquestion_id="q2"
    )
    (line,) = error_caveats([error])
    assert (
        len(line) <= CAVEAT_MAX_CHARS
        and "\n" not in line
        and line.startswith("research for q2: line one line two")
    )
    # The same URL skipped for three sub-questions is one caveat naming how many it affected.
    skipped = "https://example.org/a was skipped: it answered 404"
    same = [
        RunError(run_id="r1", stage="research", detail=skipped, subquestion_id=f"q{n}") for n in (1, 2, 3)
    ]
    assert error_caveats([*same, same[0]]) == [f"research (3 sub-questions): {skipped}"]


def test_the_rules_follow_ups_come_first_and_a_model_follow_up_that_is_no_question_is_dropped() -> None:
    class Restating:
        def follow_up(self, evidence: SynthesisInput, limit: int) -> list[SubQuestion]:
            return [
                SubQuestion(id="f0", position=0, text="Acme Corp makes anvils.", query="anvils"),
                SubQuestion(id="f1", position=1, text="Where is Dayton?", query="Dayton Ohio city"),
            ]

    engine = model_engine(planner=Restating())
    rules = extractive_engine().planner.follow_up(REQUEST, 5)

    followups = follow_up(engine, REQUEST, 5, Step())

    assert rules and [s.text for s in followups] == [*(s.text for s in rules), "Where is Dayton?"][:5]
    assert "Acme Corp makes anvils." not in [s.text for s in followups]


def test_a_role_no_model_plays_neither_falls_back_nor_is_topped_up_twice(store: EvidenceStore) -> None:
    # A model writes; the extractive engine plans and verifies, so there is nothing to fall back from.
    engine = model_engine(synthesiser=OneSentence("Jane Doe founded Acme Corp.", "S1"))
    alone = "What language were ledgers being copied into during the reign of Osric of Wendmere?"
    planned = Step()

    subquestions = plan(engine, alone, 5, 3, planned)

    assert subquestions == plan(extractive_engine(), alone, 5, 3, Step())  # short of 3, as it is alone
    page = put(store)
    verified = Step()
    claims = verify_page(engine, SUB, page, "C1", 3, 20, 0.6, verified)
    assert claims == verify_page(extractive_engine(), SUB, page, "C1", 3, 20, 0.6, Step())
    assert "extractive:" not in verified.detail  # the page was read once, not again as a top-up
    assert engine.degradations.drain() == []
    assert (planned.outcome, verified.outcome) == (Outcome.ok, Outcome.ok)
