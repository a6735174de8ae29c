"""The critic's mechanical checks: each SentenceCheck, the critique, and splitting a draft."""

from __future__ import annotations

import pytest

from citeflow.checks import (
    claims_by_source,
    classify,
    failing_sentences,
    is_factual,
    mechanical_critique,
    prune_citations,
)
from citeflow.contracts import (
    Claim,
    ClaimStatus,
    Critique,
    Draft,
    DraftSentence,
    SentenceCheck,
    SentenceProblem,
)


def claim(
    claim_id: str, text: str, source_id: str | None, status: ClaimStatus = ClaimStatus.verified
) -> Claim:
    return Claim(
        id=claim_id,
        subquestion_id="q1",
        page_id="p1",
        page_hash="h",
        text=text,
        quote=text,
        quote_start=0 if status is ClaimStatus.verified else None,
        quote_end=len(text) if status is ClaimStatus.verified else None,
        status=status,
        source_id=source_id,
    )


CLAIMS = [
    claim("C1.1", "Christopher Nolan (born 30 July 1970) is an English-American film director.", "S1"),
    claim("C2.1", "Sathish Kalathil is an Indian film and documentary director and producer.", "S2"),
    claim("C3.1", "The Blue Lacy was developed in Texas in the mid-1800s.", None, ClaimStatus.rejected),
]
GROUPED = claims_by_source(CLAIMS)


def sentence(text: str, *cites: str) -> DraftSentence:
    return DraftSentence(text=text, cites=list(cites), section="q1")


def test_claims_by_source_holds_only_verified_claims_with_a_source() -> None:
    assert sorted(GROUPED) == ["S1", "S2"]
    assert [c.id for c in GROUPED["S1"]] == ["C1.1"]


@pytest.mark.parametrize(
    ("draft_sentence", "check", "detail_has"),
    [
        (sentence("Christopher Nolan is an English-American film director.", "S1"), SentenceCheck.ok, ""),
        (sentence("Both are film directors.", "S1", "S2"), SentenceCheck.ok, ""),
        (sentence("Background"), SentenceCheck.ok, ""),  # a heading states nothing
        (sentence("In short:"), SentenceCheck.ok, ""),
        (sentence("Nolan was born in 1970."), SentenceCheck.uncited, "cites no source"),
        (sentence("Nolan directs films in London."), SentenceCheck.uncited, "cites no source"),
        (sentence("Christopher Nolan is a film director.", "S1", "S9"), SentenceCheck.unknown_id, "S9"),
        (sentence("Christopher Nolan was born in 1971.", "S1"), SentenceCheck.unsupported, "1971"),
        (
            sentence("Christopher Nolan is a director from Chicago.", "S1"),
            SentenceCheck.unsupported,
            "Chicago",
        ),
        (sentence("Kalathil was born in 1970.", "S1"), SentenceCheck.unsupported, "Kalathil"),
        (
            sentence("Nolan enjoys cooking spicy vegetarian dinners.", "S1"),
            SentenceCheck.unsupported,
            "enjoys, cooking, spicy, vegetarian, dinners",
        ),
    ],
)
def test_classify(draft_sentence: DraftSentence, check: SentenceCheck, detail_has: str) -> None:
    verdict, detail = classify(draft_sentence, GROUPED)
    assert verdict is check
    assert detail_has in detail
    assert bool(detail) == (check is not SentenceCheck.ok)


def test_a_rejected_claims_source_is_unknown() -> None:
    rejected_only = claims_by_source([CLAIMS[2].model_copy(update={"source_id": "S3"})])
    verdict, detail = classify(sentence("The Blue Lacy was developed in Texas.", "S3"), rejected_only)
    assert verdict is SentenceCheck.unknown_id
    assert "S3" in detail


def test_is_factual() -> None:
    assert is_factual("The film grossed money.")
    assert is_factual("Nolan directed.") is False  # two content words, first word capitalised by grammar
    assert is_factual("It premiered on BBC.")
    assert not is_factual("Early life")


def test_mechanical_critique_approves_a_clean_draft() -> None:
    draft = Draft(
        sentences=[
            sentence("Christopher Nolan is an English-American film director.", "S1"),
            sentence("Sathish Kalathil is an Indian film director.", "S2"),
        ]
    )
    critique = mechanical_critique(draft, CLAIMS)
    assert critique.approved
    assert critique.problems == []
    assert "all 2 sentences pass" in critique.notes


def test_mechanical_critique_lists_every_failing_sentence() -> None:
    draft = Draft(
        sentences=[
            sentence("Christopher Nolan is an English-American film director.", "S1"),
            sentence("Nolan was born in 1970."),
            sentence("Sathish Kalathil is an Indian film director.", "S7"),
            sentence("Sathish Kalathil was born in 1980.", "S2"),
        ]
    )
    critique = mechanical_critique(draft, CLAIMS)
    assert not critique.approved
    assert [(p.index, p.check) for p in critique.problems] == [
        (1, SentenceCheck.uncited),
        (2, SentenceCheck.unknown_id),
        (3, SentenceCheck.unsupported),
    ]
    assert critique.notes == "3 of 4 sentences failed the mechanical checks"


def test_mechanical_critique_does_not_approve_an_empty_draft() -> None:
    critique = mechanical_critique(Draft(sentences=[]), CLAIMS)
    assert not critique.approved
    assert critique.notes == "the draft has no sentences"


def test_failing_sentences_are_named_by_position_with_their_first_reason() -> None:
    sentences = [sentence(f"Sentence number {n} about Nolan.", "S1") for n in range(4)]
    critique = Critique(
        approved=False,
        problems=[
            SentenceProblem(index=2, check=SentenceCheck.unsupported, detail="not in the cited quotes: 2"),
            SentenceProblem(index=0, check=SentenceCheck.uncited),
            SentenceProblem(
                index=0, check=SentenceCheck.unknown_id, detail="a second problem, same sentence"
            ),
            SentenceProblem(index=9, check=SentenceCheck.uncited),  # names no sentence: ignored
        ],
    )
    assert failing_sentences(Draft(sentences=sentences), critique) == {
        2: "unsupported: not in the cited quotes: 2",
        0: "uncited",
    }


def test_an_approved_draft_has_no_failing_sentence() -> None:
    draft = Draft(sentences=[sentence("Christopher Nolan is a film director.", "S1")])
    assert failing_sentences(draft, Critique(approved=True)) == {}


def test_a_sentence_saying_the_opposite_of_its_quote_is_unsupported() -> None:
    grouped = claims_by_source(
        [claim("C4.1", "Lee Roy Selmon made his rookie debut in 1976 for the Buccaneers.", "S4")]
    )
    verdict, detail = classify(sentence("Selmon did not make his rookie debut in 1976.", "S4"), grouped)
    assert (verdict, detail) == (SentenceCheck.unsupported, "negates what its cited quotes state")


def test_citations_that_support_nothing_in_the_sentence_are_dropped() -> None:
    claims = [
        *CLAIMS,
        claim("C4.1", "Meryl Streep is an American actress.", "S3"),
        claim("C5.1", "Christopher Nolan directed Inception.", "S4"),
    ]
    draft = Draft(
        sentences=[
            # S3 (an actress) shares only "American", which S1 covers; S2 shares nothing at all
            sentence("Christopher Nolan is an English-American film director.", "S1", "S3", "S2"),
            # S1 and S4 both support most of it: both stay; S2 (Kalathil, a director too) names no Nolan
            sentence("Christopher Nolan is a film director.", "S1", "S4", "S1", "S2"),
            sentence("Nolan's films are acclaimed.", "S9"),  # unknown: kept for classify to report
        ]
    )
    pruned, dropped = prune_citations(draft, claims)
    assert [s.cites for s in pruned.sentences] == [["S1"], ["S1", "S4"], ["S9"]]
    assert dropped == 4  # S3 and S2 of the first, the repeated S1 and S2 of the second


def test_a_capitalised_first_word_is_no_name_unless_the_evidence_capitalises_it_inside_a_sentence() -> None:
    released = "that the plume releases about 900 kilograms of ice a second."
    claims = [
        claim("C1.1", f"Scientists estimate {released}", "S1"),
        claim("C2.1", f"The agency estimates {released}", "S2"),
        claim("C3.1", f"Marlow estimates {released}", "S3"),
        claim("C4.1", "The survey led by Marlow found the plume.", "S4"),
    ]
    draft = Draft(
        sentences=[
            # "Scientists" begins the sentence: S2 says the same without it and stays cited.
            sentence(f"Scientists estimate {released}", "S1", "S2"),
            # "Marlow" is a name (S4 writes it inside a sentence): S2, which never names Marlow, goes.
            sentence(f"Marlow estimates {released}", "S3", "S2"),
        ]
    )
    pruned, dropped = prune_citations(draft, claims)
    assert [s.cites for s in pruned.sentences] == [["S1", "S2"], ["S3"]]
    assert dropped == 1
