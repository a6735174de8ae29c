"""The stage functions' own rules, without Prefect: plan enforcement, page selection, caveats and status."""

from __future__ import annotations

from citeflow.contracts import (
    Claim,
    ClaimStatus,
    Critique,
    Draft,
    DraftSentence,
    RunSource,
    RunStatus,
    SubQuestion,
)
from tasks.finish import caveats_for, render_markdown, run_status, slug
from tasks.planner import enforce_plan
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


def test_select_pages_goes_rank_by_rank_and_gives_every_sub_question_a_page() -> None:
    sources = [source("q1", "p1", 1), source("q1", "p2", 2), source("q1", "p3", 3)]
    sources += [source("q2", "p1", 1), source("q2", "p4", 2), source("q3", "p2", 1)]

    pairs, found = select_pages(sources, max_pages=4)

    # q2's best page is q1's too: q2 still reads it, since it has no page of its own yet.
    # At rank 2, p2 is skipped for q1, which has read p1 and whose p2 is q3's already.
    assert pairs == [("p1", "q1"), ("p1", "q2"), ("p2", "q3"), ("p4", "q2")]
    assert found == 4
    assert select_pages(sources, max_pages=1)[0] == [("p1", "q1")]


def claim(subquestion_id: str) -> Claim:
    return Claim(
        id="C1.1", run_id="r", subquestion_id=subquestion_id, page_id="p1", page_hash="h", text="t",
        quote="a quote long enough to count", status=ClaimStatus.verified, source_id="S1",
    )  # fmt: skip


def review(end: LoopEnd, removed: dict[int, str]) -> Review:
    draft = Draft(sentences=[DraftSentence(text="Water boils at 100 C.", cites=["S1"], section="q1")])
    return Review(draft, Critique(approved=end is LoopEnd.approved), 1, end, removed)


def test_caveats_say_what_is_missing_and_the_status_follows() -> None:
    subs = [sub(1, "Why?"), sub(2, "Where?")]
    clean = review(LoopEnd.approved, {})
    capped = review(LoopEnd.revision_cap, {0: "unknown_id: cites S9"})

    assert caveats_for(subs, [claim("q1"), claim("q2")], clean, [], 2, 2) == []
    assert run_status(clean, []) is RunStatus.complete
    caveats = caveats_for(subs, [claim("q1")], capped, ["research for q2: failed"], 5, 2)
    assert caveats == [
        "research for q2: failed",
        "Only 2 of the 5 pages found were verified (the per-run cap).",
        'No verified evidence was found for "Where?".',
        "1 sentence(s) were removed because they failed the citation checks (unknown_id).",
        "The critic did not approve this report after 1 revision(s), the most allowed.",
    ]
    assert run_status(capped, caveats) is RunStatus.failed  # its only sentence was removed
    assert run_status(None, []) is RunStatus.failed


def test_markdown_cites_inline_and_lists_only_cited_sources() -> None:
    from datetime import UTC, datetime

    from citeflow.contracts import Source

    read = datetime(2026, 1, 2, tzinfo=UTC)
    sources = [
        Source(id="S1", page_id="p1", url="https://a.example/", title="A", stored_at=read),
        Source(id="S2", page_id="p2", url="https://b.example/", title="B", stored_at=read),
    ]
    markdown = render_markdown(
        "Why?", "extractive", RunStatus.complete, [sub(1, "Why?")], review(LoopEnd.approved, {}), sources, []
    )

    assert "- Water boils at 100 C. [S1]" in markdown
    assert "- [S1] A. https://a.example/ (read 2026-01-02)" in markdown
    assert "S2" not in markdown
    assert (
        slug("What's the boiling point of water, at 2,000 m?")
        == "what-s-the-boiling-point-of-water-at-2-000-m"
    )


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
