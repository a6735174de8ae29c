"""The stage functions' own rules, without Prefect: plan enforcement, page selection, caveats and status."""

from __future__ import annotations

from datetime import UTC, datetime

from citeflow.contracts import (
    Claim,
    ClaimStatus,
    Critique,
    Draft,
    DraftSentence,
    RunSource,
    RunStatus,
    Source,
    SubQuestion,
)
from tasks.finish import (
    NOT_FOUND,
    NOT_FOUND_CAVEAT,
    answers,
    caveats_for,
    first_cited_numbers,
    reading_order,
    render_markdown,
    renumbered,
    run_status,
    slug,
)
from tasks.planner import enforce_follow_ups, enforce_plan
from tasks.verifier import select_pages
from tasks.writer import LoopEnd, Review


def source(subquestion_id: str, page_id: str, rank: int) -> RunSource:
    return RunSource(run_id="r", subquestion_id=subquestion_id, page_id=page_id, provider="local", rank=rank)


def sub(n: int, text: str, query: str = "") -> SubQuestion:
    return SubQuestion(id=f"q{n}", position=n - 1, text=text, query=query or text)


def test_enforce_plan_puts_the_question_first_dedupes_caps_and_renumbers() -> None:
    proposed = [sub(7, "A?"), sub(8, "a? "), sub(9, "q?"), sub(10, "  "), sub(11, "C?"), sub(12, "D?")]

    plan = enforce_plan("Q?", proposed, max_subquestions=3)

    assert [(s.id, s.position, s.text) for s in plan] == [("q1", 0, "Q?"), ("q2", 1, "A?"), ("q3", 2, "C?")]
    assert enforce_plan("Q?", [], 5) == [SubQuestion(id="q1", position=0, text="Q?", query="Q?")]


def test_enforce_plan_fills_up_to_the_minimum_only() -> None:
    fill = [sub(1, "Q?"), sub(2, "F1?"), sub(3, "F2?"), sub(4, "F3?")]

    plan = enforce_plan("Q?", [sub(5, "A?")], 5, fill, min_subquestions=3)

    assert [s.text for s in plan] == ["Q?", "A?", "F1?"]
    # A fill sub-question asking what a proposed one asks, with another query, is the same question.
    same = [sub(6, "A?", "a different query"), sub(7, "F1?")]
    assert [s.text for s in enforce_plan("Q?", [sub(5, "A?")], 5, same, 3)] == ["Q?", "A?", "F1?"]


def test_follow_ups_are_numbered_after_the_plan_and_never_repeat_a_query() -> None:
    plan = [sub(1, "Q?", "q query"), sub(2, "About A?", "a")]
    proposed = [
        sub(9, "About B?", "b"),
        sub(9, "About A again?", "A"),  # the same search as q2
        sub(9, "About A?", "another query"),  # the same question as q2
        sub(9, " ", "x"),
        sub(9, "C?", "c"),
    ]

    followups = enforce_follow_ups(plan, proposed, limit=2)

    assert [(s.id, s.position, s.query) for s in followups] == [("q3", 2, "b"), ("q4", 3, "c")]
    assert enforce_follow_ups(plan, proposed, limit=0) == []


def test_select_pages_goes_rank_by_rank_and_gives_every_sub_question_a_page() -> None:
    sources = [source("q1", "p1", 1), source("q1", "p2", 2), source("q1", "p3", 3)]
    sources += [source("q2", "p1", 1), source("q2", "p4", 2), source("q3", "p2", 1)]

    pairs, found = select_pages(sources, max_pages=4)

    # q2's best page is q1's too: q2 still reads it, since it has no page of its own yet.
    # At rank 2, p2 is skipped for q1, which has read p1 and whose p2 is q3's already.
    assert pairs == [("p1", "q1"), ("p1", "q2"), ("p2", "q3"), ("p4", "q2")]
    assert found == 4
    assert select_pages(sources, max_pages=1)[0] == [("p1", "q1")]


def claim(subquestion_id: str, source_id: str = "S1") -> Claim:
    return Claim(
        id="C1.1", subquestion_id=subquestion_id, page_id="p1", page_hash="h", text="t",
        quote="a quote long enough to count", status=ClaimStatus.verified, source_id=source_id,
    )  # fmt: skip


def review(end: LoopEnd, removed: dict[int, str], *sentences: DraftSentence) -> Review:
    draft = Draft(
        sentences=list(sentences) or [DraftSentence(text="Water boils at 100 C.", cites=["S1"], section="")]
    )
    return Review(draft, Critique(approved=end is LoopEnd.approved), 1, end, removed)


def test_caveats_say_what_is_missing_and_the_status_follows() -> None:
    subs = [sub(1, "Why?"), sub(2, "Where?")]
    clean = review(LoopEnd.approved, {})
    capped = review(LoopEnd.revision_cap, {0: "unknown_id: cites S9"})

    # A report that answers: a sub-question with no evidence was a lead that went nowhere, not a gap.
    assert caveats_for(subs, [claim("q1")], clean, [], 2, 2) == []
    assert run_status(clean, []) is RunStatus.complete
    caveats = caveats_for(subs, [claim("q1")], capped, ["research for q2: failed"], 5, 2)
    assert caveats == [
        "research for q2: failed",
        "Only 2 of the 5 pages found were verified (the per-run cap).",
        'No verified evidence was found for "Where?".',  # no sentence is left to answer
        "1 sentence(s) were removed because they failed the citation checks (unknown_id).",
        "The critic did not approve this report after 1 revision(s), the most allowed.",
    ]
    assert run_status(capped, caveats) is RunStatus.failed  # its only sentence was removed
    assert run_status(None, []) is RunStatus.failed


def test_a_report_that_does_not_answer_says_so_first_and_lists_related_evidence() -> None:
    related = review(
        LoopEnd.approved, {}, DraftSentence(text="Water boils at 100 C.", cites=["S1"], section="q1")
    )
    subs = [sub(1, "Why?"), sub(2, "Where?")]
    caveats = caveats_for(subs, [claim("q1")], related, [], 2, 2)
    assert caveats == [NOT_FOUND_CAVEAT, 'No verified evidence was found for "Where?".']
    assert run_status(related, caveats) is RunStatus.partial and not answers(related)
    markdown = render_markdown("Why?", "extractive", RunStatus.partial, subs, related, SOURCES, caveats)
    body = markdown.split("\n\n", 2)[2]
    assert body.startswith(NOT_FOUND)
    assert "## Related evidence\n\n- Water boils at 100 C. [S1]" in markdown


READ = datetime(2026, 1, 2, tzinfo=UTC)
SOURCES = [
    Source(id="S1", page_id="p1", url="https://a.example/", title="A", stored_at=READ),
    Source(id="S2", page_id="p2", url="https://b.example/", title="B", stored_at=READ),
    Source(id="S3", page_id="p3", url="https://c.example/", title="C", stored_at=READ),
]


def test_markdown_opens_with_the_answer_and_lists_only_cited_sources() -> None:
    answered = review(
        LoopEnd.approved,
        {},
        DraftSentence(text="It rose in 1990.", cites=["S1"], section="q1"),
        DraftSentence(text="The answer is yes.", section=""),
        DraftSentence(text="Water boils at 100 C.", cites=["S1"], section=""),
    )
    markdown = render_markdown(
        "Why?", "extractive", RunStatus.complete, [sub(1, "Why?")], answered, SOURCES, []
    )
    assert markdown.split("\n\n")[2] == "The answer is yes. Water boils at 100 C. [S1]"
    assert "## Supporting evidence\n\n- It rose in 1990. [S1]" in markdown
    assert "- [S1] A. https://a.example/ (read 2026-01-02)" in markdown
    assert "S2" not in markdown and "S3" not in markdown
    # A title that ends as a sentence gets no second full stop.
    ended = [SOURCES[0].model_copy(update={"title": "Water boils at 100 C."})]
    markdown = render_markdown(
        "Why?", "extractive", RunStatus.complete, [sub(1, "Why?")], answered, ended, []
    )
    assert "- [S1] Water boils at 100 C. https://a.example/ (read 2026-01-02)" in markdown
    assert (
        slug("What's the boiling point of water, at 2,000 m?")
        == "what-s-the-boiling-point-of-water-at-2-000-m"
    )


def test_sources_are_renumbered_in_first_citation_order_with_no_gaps() -> None:
    subs = [sub(1, "Why?"), sub(2, "Where?")]
    draft = review(
        LoopEnd.approved,
        {1: "unknown_id: cites S9"},
        DraftSentence(text="Second section.", cites=["S1"], section="q2"),
        DraftSentence(text="Removed.", cites=["S2"], section="q1"),
        DraftSentence(text="First section.", cites=["S3", "S1"], section="q1"),
        DraftSentence(text="The answer.", cites=["S3"], section=""),
    )
    ordered = reading_order(draft.kept, subs)
    assert [sentence.text for sentence in ordered] == ["The answer.", "First section.", "Second section."]
    numbers = first_cited_numbers(ordered, SOURCES)
    assert numbers == {"S3": "S1", "S1": "S2", "S2": "S3"}  # S2 is cited by no kept sentence: last
    claims = [claim("q1", "S1"), claim("q1", "S3")]
    renewed, sources, claims = renumbered(draft, SOURCES, claims, numbers)
    assert [s.cites for s in renewed.draft.sentences] == [["S2"], ["S3"], ["S1", "S2"], ["S1"]]
    assert [(s.id, s.title) for s in sources] == [("S1", "C"), ("S2", "A"), ("S3", "B")]
    assert [c.source_id for c in claims] == ["S2", "S1"]
    assert renewed.removed == draft.removed


def test_a_sentence_still_failing_after_the_loop_is_removed_by_position() -> None:
    from dataclasses import replace

    from citeflow.contracts import SynthesisInput
    from citeflow.extractive import extractive_engine
    from tasks.writer import EngineSteps, write_report

    class Stubborn:
        """A synthesiser that ignores every critique: the loop must end on no progress."""

        def write(self, request: SynthesisInput) -> Draft:
            return Draft(
                sentences=[
                    DraftSentence(text="a quote long enough to count", cites=["S1"], section="q1"),
                    DraftSentence(text="Paris is the capital of Peru.", cites=["S9"], section="q1"),
                ]
            )

    engine = replace(extractive_engine(), synthesiser=Stubborn())
    request = SynthesisInput(question="Why?", subquestions=[sub(1, "Why?")], claims=[claim("q1")], sources=[])

    review = write_report(EngineSteps(engine), request, revisions_max=2, may_revise=lambda: True)

    assert review.end is LoopEnd.same_draft and review.revisions == 1
    assert set(review.removed) == {1} and review.removed[1].startswith("unknown_id")
    assert [sentence.text for sentence in review.kept] == ["a quote long enough to count"]


def test_the_loop_ends_when_the_critic_repeats_itself_on_a_changed_draft() -> None:
    from dataclasses import replace

    from citeflow.contracts import SentenceCheck, SentenceProblem, SynthesisInput
    from citeflow.extractive import extractive_engine
    from tasks.writer import EngineSteps, write_report

    same = Critique(
        approved=False,
        notes="too thin",
        problems=[SentenceProblem(index=0, check=SentenceCheck.unsupported, detail="say more")],
    )

    class Growing:
        """A synthesiser whose every draft differs from the last (one more sentence each time)."""

        def __init__(self) -> None:
            self.drafts: list[Draft] = []

        def write(self, request: SynthesisInput) -> Draft:
            sentence = DraftSentence(text="a quote long enough to count", cites=["S1"], section="q1")
            self.drafts.append(Draft(sentences=[sentence] * (len(self.drafts) + 1)))
            return self.drafts[-1]

    class Repeating:
        """A critic that gives the same critique of whatever it is shown."""

        def __init__(self) -> None:
            self.reviewed: list[Draft] = []

        def review(self, request: SynthesisInput, draft: Draft) -> Critique:
            self.reviewed.append(draft)
            return same

    synthesiser, critic = Growing(), Repeating()
    engine = replace(extractive_engine(), synthesiser=synthesiser, critic=critic)
    request = SynthesisInput(question="Why?", subquestions=[sub(1, "Why?")], claims=[claim("q1")], sources=[])

    review = write_report(EngineSteps(engine), request, revisions_max=2, may_revise=lambda: True)

    assert review.end is LoopEnd.same_critique and review.revisions == 1  # one short of the cap of 2
    assert len(synthesiser.drafts) == 2 and synthesiser.drafts[0] != synthesiser.drafts[1]
    assert critic.reviewed == synthesiser.drafts  # both drafts passed the mechanical checks
    assert review.critique == same and review.draft == synthesiser.drafts[1]
    assert review.caveat == (
        "The critic did not approve this report and repeated the same critique of the revised draft."
    )
