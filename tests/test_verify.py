"""The mechanical quote check: found, offsets into the original page, and every rejection reason."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest

from citeflow.contracts import ClaimDraft, ClaimStatus, Origin, Page
from citeflow.text import normalise
from citeflow.verify import find_quote, unsupported_details, verify_drafts

PAGE_TEXT = (
    "Christopher Edward Nolan (born 30\u00a0July 1970) is an English\u2013American film director.\n\n"
    "He directed \u201cInception\u201d (2010), which grossed over $836\u00a0million worldwide.  "
    "Nolan\u2019s films have earned 11 Academy Awards."
)


def make_page(text: str = PAGE_TEXT) -> Page:
    return Page(
        id="p1",
        url="https://en.wikipedia.org/wiki/Christopher_Nolan",
        canonical_url="https://en.wikipedia.org/wiki/Christopher_Nolan",
        title="Christopher Nolan",
        text=text,
        content_hash=hashlib.sha256(text.encode()).hexdigest(),
        origin=Origin.ingested,
        stored_at=datetime(2024, 1, 1, tzinfo=UTC),
    )


@pytest.mark.parametrize(
    "quote",
    [
        "is an English-American film director",  # ASCII hyphen for the page's en dash
        'He directed "Inception" (2010)',  # straight quotes for the page's curly ones
        "grossed over $836 million   worldwide",  # plain spaces for a no-break space, extra spaces
        "Nolan's films have earned 11 Academy Awards.",  # straight apostrophe
        "director.\nHe directed",  # a line break where the page has a paragraph break
    ],
)
def test_find_quote_across_typography_points_at_the_original(quote: str) -> None:
    span = find_quote(PAGE_TEXT, quote)
    assert span is not None
    start, end = span
    assert normalise(PAGE_TEXT[start:end]) == normalise(quote)


def test_find_quote_offsets_are_exact() -> None:
    assert find_quote(PAGE_TEXT, "“Inception”") == (PAGE_TEXT.index("“"), PAGE_TEXT.index("”") + 1)


def test_find_quote_absent_or_empty() -> None:
    assert find_quote(PAGE_TEXT, "is an American film director") is None
    assert find_quote(PAGE_TEXT, "inception") is None  # case matters: a quote is verbatim
    assert find_quote(PAGE_TEXT, "  \n ") is None


def _verify(drafts: list[ClaimDraft]):  # type: ignore[no-untyped-def]
    return verify_drafts(drafts, make_page(), "q2", "run-1", "C3", 20)


def test_verified_claim_stores_the_pages_own_quote_and_offsets() -> None:
    [claim] = _verify(
        [ClaimDraft(text="He directed Inception in 2010.", quote='He directed "Inception" (2010)')]
    )
    assert claim.status is ClaimStatus.verified
    assert claim.id == "C3.1"
    assert (claim.run_id, claim.subquestion_id, claim.page_id) == ("run-1", "q2", "p1")
    assert claim.page_hash == make_page().content_hash
    assert claim.quote == "He directed \u201cInception\u201d (2010)"
    assert claim.quote_start is not None and claim.quote_end is not None
    assert PAGE_TEXT[claim.quote_start : claim.quote_end] == claim.quote
    assert claim.reason == ""


def test_each_rejection_reason() -> None:
    claims = _verify(
        [
            ClaimDraft(text="  ", quote="He directed \u201cInception\u201d (2010)"),
            ClaimDraft(text="Nolan was born in 1970.", quote="born 30 July"),
            ClaimDraft(text="Nolan is American.", quote="is an American film director"),
            ClaimDraft(
                text="Nolan has 11 Academy Awards.", quote="Nolan's films have earned 11 Academy Awards."
            ),
            ClaimDraft(
                text="His films won 11 awards.", quote="Nolan\u2019s films have earned 11 Academy Awards."
            ),
        ]
    )
    assert [claim.id for claim in claims] == ["C3.1", "C3.2", "C3.3", "C3.4", "C3.5"]
    assert [claim.status for claim in claims] == [
        ClaimStatus.rejected,
        ClaimStatus.rejected,
        ClaimStatus.rejected,
        ClaimStatus.verified,
        ClaimStatus.rejected,
    ]
    assert [claim.reason for claim in claims] == [
        "empty claim",
        "quote shorter than 20 characters",
        "quote not found in page text",
        "",
        "duplicate of C3.4",
    ]
    assert all(claim.quote_start is None for claim in claims if claim.status is ClaimStatus.rejected)


def test_a_claim_with_details_absent_from_its_quote_is_rejected() -> None:
    draft = ClaimDraft(
        text="Inception (2011) grossed $900 million for Warner.", quote="grossed over $836 million"
    )
    [claim] = _verify([draft])
    assert claim.status is ClaimStatus.rejected
    assert claim.reason == "unsupported detail: 2011, 900, Inception, Warner"


def test_unsupported_details() -> None:
    quote = "Christopher Edward Nolan (born 30 July 1970) is an English-American film director."
    assert unsupported_details("Film director Nolan was born in 1970.", quote) == []  # "Film": grammar
    assert unsupported_details("Nolan was born in London in 1971.", quote) == ["1971", "London"]
    assert unsupported_details("It sold 2,141 copies.", "It sold 2141 copies.") == []
    assert unsupported_details("Nolan is English-American.", quote) == []
