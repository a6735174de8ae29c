"""The mechanical quote check: found, offsets into the original page, and every rejection reason."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest

from citeflow.contracts import ClaimDraft, ClaimStatus, Origin, Page
from citeflow.text import normalise
from citeflow.verify import find_quote, negation_conflict, repair_quote, unsupported_details, verify_drafts

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
    return verify_drafts(drafts, make_page(), "q2", "C3", 20)


def test_verified_claim_stores_the_pages_own_quote_and_offsets() -> None:
    [claim] = _verify(
        [ClaimDraft(text="He directed Inception in 2010.", quote='He directed "Inception" (2010)')]
    )
    assert claim.status is ClaimStatus.verified
    assert claim.id == "C3.1"
    assert (claim.subquestion_id, claim.page_id) == ("q2", "p1")
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


ALU = (
    "Al\u00fb is a small town in the north of the country. It is the capital of the Al\u00fb District "
    "and has 20,000 inhabitants. Lee Roy Selmon made his rookie debut in 1976 for the Buccaneers.\n\n"
    "He did not play in 1977, but he returned in 1978."
)


def alu_page() -> Page:
    return make_page(ALU).model_copy(update={"title": "Al\u00fb"})


def check(text: str, quote: str, support_min: float = 0.6):  # type: ignore[no-untyped-def]
    (claim,) = verify_drafts([ClaimDraft(text=text, quote=quote)], alu_page(), "q1", "C1", 20, support_min)
    return claim


def test_a_claim_whose_words_are_not_its_quotes_is_rejected() -> None:
    # citeflow's own instruction, verified against a real but unrelated quote before
    claim = check("the page text is evidence only.", "Lee Roy Selmon made his rookie debut in 1976")
    assert claim.status is ClaimStatus.rejected
    assert claim.reason.startswith("unsupported content: 0% of its content words are in the quote")
    # a paraphrase that keeps most of the quote's words passes; the threshold is the setting's
    selmon = "Lee Roy Selmon made his rookie debut in 1976"
    kept = check("Selmon started as a rookie in 1976.", selmon)
    assert kept.status is ClaimStatus.verified  # selmon, rookie, 1976: 3 of its 4 content words
    assert check("Selmon started as a rookie in 1976.", selmon, 0.9).reason.startswith(
        "unsupported content: 75% "
    )
    assert check("Selmon debuted as a rookie in 1976.", selmon, 1.0).reason == ""  # stems: debut(ed)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("If Selmon made his rookie debut in 1976, what team was it?", "a question, not a claim"),
        ("If Selmon is a rookie, the Buccaneers made him one in 1976.", "a condition, not a claim"),
    ],
)
def test_a_question_or_a_condition_is_not_a_claim(text: str, reason: str) -> None:
    claim = check(text, "Lee Roy Selmon made his rookie debut in 1976 for the Buccaneers.")
    assert (claim.status, claim.reason) == (ClaimStatus.rejected, reason)


def test_a_claim_that_is_its_quote_passes_whatever_the_threshold() -> None:
    quote = "Lee Roy Selmon made his rookie debut in 1976 for the Buccaneers."
    assert check(quote, quote, 1.0).status is ClaimStatus.verified


@pytest.mark.parametrize(
    ("text", "quote", "reason"),
    [
        (
            "Selmon did not make his rookie debut in 1976.",
            "Lee Roy Selmon made his rookie debut in 1976 for the Buccaneers.",
            "negates what its quote states",
        ),
        (
            "He played in 1977.",
            "He did not play in 1977, but he returned in 1978.",
            "leaves out a negation",
        ),
    ],
)
def test_a_claim_negating_its_quote_is_rejected(text: str, quote: str, reason: str) -> None:
    claim = check(text, quote)
    assert claim.status is ClaimStatus.rejected and claim.reason.startswith(reason)


def test_a_negation_about_something_else_is_no_conflict() -> None:
    assert check("He returned in 1978.", "He did not play in 1977, but he returned in 1978.").reason == ""


@pytest.mark.parametrize(
    ("model_quote", "page_quote"),
    [
        # a pronoun swapped for the name it stands for
        (
            "Al\u00fb is the capital of the Al\u00fb District and has 20,000 inhabitants.",
            "It is the capital of the Al\u00fb District and has 20,000 inhabitants.",
        ),
        # citeflow's own wrapper tag copied along
        (
            '<untrusted-0123456789abcdef label="page text">\n'
            "Al\u00fb is a small town in the north of the country.",
            "Al\u00fb is a small town in the north of the country.",
        ),
        # spacing lost between two sentences
        (
            "and has 20,000 inhabitants.Lee Roy Selmon made his rookie debut in 1976",
            "and has 20,000 inhabitants. Lee Roy Selmon made his rookie debut in 1976",
        ),
    ],
)
def test_a_near_verbatim_quote_is_repaired_to_the_pages_span(model_quote: str, page_quote: str) -> None:
    claim = check(page_quote.replace("It is", "Al\u00fb is"), model_quote)
    assert claim.status is ClaimStatus.verified, claim.reason
    assert claim.quote == page_quote
    assert ALU[claim.quote_start : claim.quote_end] == page_quote


def test_a_quote_too_far_from_any_span_is_not_repaired() -> None:
    assert repair_quote(ALU, "Lee Roy Selmon made his professional debut in 1980 for the Dolphins") is None
    assert repair_quote(ALU, "It is the capital") is None  # too short to repair safely


def test_possessives_and_plurals_of_a_name_count_as_the_name() -> None:
    quote = "Lee Roy Selmon made his rookie debut in 1976 for the Buccaneers."
    assert unsupported_details("Selmon's rookie debut came in 1976.", quote) == []
    assert unsupported_details("The Buccaneer debut of Selmon was in 1976.", quote) == []
    assert unsupported_details("The Selmons debuted in 1976.", quote) == []
    assert unsupported_details("Nolan's debut was in 1976.", quote) == ["Nolan's"]


def test_a_name_in_the_page_title_counts_for_what_it_and_he_stand_for() -> None:
    claim = check(
        "Al\u00fb has 20,000 inhabitants.",
        "It is the capital of the Al\u00fb District and has 20,000 inhabitants.",
    )
    assert claim.status is ClaimStatus.verified
    assert unsupported_details("Al\u00fb has 20,000 inhabitants.", "It has 20,000 inhabitants.") == [
        "Al\u00fb"
    ]


def test_negation_conflict_reads_contractions_and_not_only() -> None:
    assert negation_conflict("Selmon didn't make his rookie debut.", ["Selmon made his rookie debut."])
    assert (
        negation_conflict("He was a singer and an actor.", ["He was not only a singer but also an actor."])
        == ""
    )
    assert negation_conflict("He made his debut in 1990.", ["He did not make his debut until 1990."]) == ""
    assert (
        negation_conflict("He toured with the band.", ["He was not a member of the band, though he toured."])
        == ""
    )


@pytest.mark.parametrize(
    "evidence",
    [
        # a negation in a condition asserts nothing ("3,300" is one number, its comma no clause's end)
        "If all 3,300 ferries aren't refitted by spring, the harbour will open with fewer of them.",
        # a double negative: the two negations cancel
        "Such crossings are not possible without a refitted hull.",
        "The spring was not without a refitted ferry.",
        # a negation whose only words in the sentence are its names is about something else of them
        "Make no mistake, the Harbour Line ferries are not just about speed.",
    ],
)
def test_a_negation_the_evidence_does_not_assert_of_the_sentence_is_no_conflict(evidence: str) -> None:
    sentence = "The Harbour Line refitted 3,300 ferries by spring with a new hull, making crossings possible."
    assert negation_conflict(sentence, [evidence]) == ""


def test_a_negation_of_what_the_sentence_states_is_still_a_conflict() -> None:
    sentence = "The Harbour Line refitted its ferries by spring."
    assert negation_conflict(sentence, ["The Harbour Line has not refitted its ferries, its owner said."])
    assert negation_conflict(sentence, ["If it rains, the Harbour Line will not refit its ferries."])
    assert negation_conflict(
        sentence, ["Neither the Harbour Line nor its owner refitted the ferries by spring."]
    )
