"""The extractive engine: planner on the real evaluation questions, verifier, synthesiser, critic."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from citeflow.checks import mechanical_critique
from citeflow.contracts import (
    Claim,
    ClaimStatus,
    Critique,
    Origin,
    Page,
    SentenceCheck,
    SentenceProblem,
    Source,
    SubQuestion,
    SynthesisInput,
)
from citeflow.extractive import ExtractivePlanner, ExtractiveVerifier, extractive_engine
from citeflow.extractive.question import key_phrases, name_spans
from citeflow.text import content_words, normalise
from citeflow.verify import verify_drafts

PLANNER = ExtractivePlanner()


@pytest.fixture(scope="module")
def eval_questions(eval_dir: Path) -> list[str]:
    """Only the question text: a run must not see answers or gold evidence."""
    with (eval_dir / "hotpotqa-100.questions.jsonl").open(encoding="utf-8") as lines:
        return [json.loads(line)["question"] for line in lines if line.strip()]


def _queries_key(query: str) -> frozenset[str]:
    return frozenset(content_words(query))


@pytest.mark.parametrize("limit", [1, 2, 3, 5])
def test_plans_for_every_eval_question_are_well_formed(eval_questions: list[str], limit: int) -> None:
    assert len(eval_questions) == 100
    sizes = []
    for question in eval_questions:
        plan = PLANNER.plan(question, limit)
        sizes.append(len(plan))
        assert 1 <= len(plan) <= limit
        assert plan[0].text == plan[0].query == normalise(question)
        assert [sub.id for sub in plan] == [f"q{n}" for n in range(1, len(plan) + 1)]
        assert [sub.position for sub in plan] == list(range(len(plan)))
        keys = [_queries_key(sub.query) for sub in plan]
        assert len(set(keys)) == len(keys), f"repeated query in the plan of {question!r}"
        assert len({" ".join(sub.text.casefold().split()) for sub in plan}) == len(plan)
    if limit >= 3:
        # Most eval questions name two things; the planner must find them, not stop at the question,
        # and facets (key phrases) fill most of the rest up to three.
        assert sum(size >= 3 for size in sizes) >= 90


@pytest.mark.parametrize(
    ("question", "sides"),
    [
        ("Are Tomas Brell and Anika Sorvald both film directors?", ["Tomas Brell", "Anika Sorvald"]),
        ("Who is the oldest, Perrin Adler or Lisette Vaugh?", ["Perrin Adler", "Lisette Vaugh"]),
        (
            "Which magazine was published first, Harbour Weekly or Velmora Review?",
            ["Harbour Weekly", "Velmora Review"],
        ),
        (
            "Which band was formed first The Gravel Saints or Low Tide Choir ?",
            ["Gravel Saints", "Low Tide Choir"],
        ),
        (
            "Are both journals, the Sailor's Almanac and Look Sharp Now, Danish publications?",
            ["Sailor's Almanac", "Look Sharp Now"],
        ),
        (
            "Between Ida Marsh and Otto Benn, which writer has had a more varied career?",
            ["Ida Marsh", "Otto Benn"],
        ),
        ("Are Oskarby and Velmora situated in the same region ?", ["Oskarby", "Velmora"]),
        ("Who was born later, Julian or Adrian?", ["Julian", "Adrian"]),
        (
            "Do both films The Glass Orchard and Winter Parade have directors from the same country?",
            ["Glass Orchard", "Winter Parade"],
        ),
    ],
)
def test_comparisons_are_split_one_sub_question_per_side(question: str, sides: list[str]) -> None:
    plan = PLANNER.plan(question, 5)
    first, second = plan[1], plan[2]
    assert sides[0] in first.text and sides[0] in first.query
    assert sides[1] in second.text and sides[1] in second.query
    # Each side's query leaves the other side out, so it searches for its own page.
    assert sides[1] not in first.query and sides[0] not in second.query


def test_side_texts_read_as_questions() -> None:
    plan = PLANNER.plan("Are Tomas Brell and Anika Sorvald both film directors?", 5)
    assert [sub.text for sub in plan[1:3]] == [
        "Is Tomas Brell a film director?",
        "Is Anika Sorvald a film director?",
    ]
    assert (
        PLANNER.plan("Who is the oldest, Perrin Adler or Lisette Vaugh?", 5)[1].text
        == "When was Perrin Adler born?"
    )
    assert (
        PLANNER.plan("Who was born later, Perrin Adler or Lisette Vaugh?", 5)[2].text
        == "When was Lisette Vaugh born?"
    )


def test_entities_get_their_own_query_and_conjunctions_are_split() -> None:
    plan = PLANNER.plan(
        "What role did Ivo Lund and Ada Fenn play in their bands, Low Tide Choir and Gravel Saints?", 5
    )
    assert len(plan) == 5
    assert [sub.query.split(" role")[0] for sub in plan[1:]] == [
        "Ivo Lund",
        "Ada Fenn",
        "Low Tide Choir",
        "Gravel Saints",
    ]
    assert plan[1].text == "What is known about Ivo Lund?"


def test_quoted_titles_and_years_are_entities() -> None:
    plan = PLANNER.plan('Who was Maren Holt married to during the recording of "Salt Roads" in 1961?', 5)
    assert [sub.query.split()[0] for sub in plan[1:4]] == ["Maren", "Salt", "1961"]


def test_no_padding_when_the_question_names_one_thing() -> None:
    plan = PLANNER.plan("What language were hymns being sung in during the reign of Alder of Kellmoor?", 5)
    # No "What is known about Alder of Kellmoor?" nor about "the era" (its one key phrase): their queries
    # would repeat the question's. The page that links to the named one is the second round's to find.
    assert len(plan) == 1
    assert PLANNER.plan("What is it?", 5) == PLANNER.plan("What is it?", 1)


def test_sub_questions_read_as_questions_a_person_would_ask(eval_questions: list[str]) -> None:
    for question in eval_questions:
        for sub in PLANNER.plan(question, 5)[1:]:
            assert sub.text.endswith("?") and sub.text[0].isupper(), sub.text
            assert "other terms" not in sub.text and "evidence say" not in sub.text, sub.text


QUICKSTART = "How does citeflow check that a quote appears on a page?"


def test_an_entity_free_question_gets_its_subject_and_key_phrases_as_sub_questions() -> None:
    plan = PLANNER.plan(QUICKSTART, 5)
    assert [(sub.text, sub.query) for sub in plan] == [
        (QUICKSTART, QUICKSTART),
        ("What is citeflow?", "citeflow"),
        # The phrase and the question's other words, minus the other phrases (citeflow, page).
        ("What is known about a quote?", "quote check appears"),
    ]
    # Facets fill the plan up to the planner's minimum, and the cap still holds.
    assert len(PLANNER.plan(QUICKSTART, 2)) == 2
    assert len(PLANNER.plan(QUICKSTART, 1)) == 1
    wider = ExtractivePlanner(min_subquestions=5).plan(QUICKSTART, 5)
    assert [sub.query for sub in wider[3:]] == ["page check appears"]


@pytest.mark.parametrize(
    ("question", "shown", "words"),
    [
        (QUICKSTART, ["citeflow", "a quote", "a page"], [("citeflow",), ("quote",), ("page",)]),
        (
            "Which of the two harbour floods destroyed the most boats?",
            ["the two harbour floods", "the boats"],
            [("two", "harbour", "floods"), ("boats",)],
        ),
        # A name is not a key phrase, "what city" is what is asked for, "known" ends the phrase.
        (
            "Notable members of the Velmora Guild include a weaver known for what city?",
            ["a weaver"],
            [("weaver",)],
        ),
        ("How does the verifier work?", ["the verifier"], [("verifier",)]),
    ],
)
def test_key_phrases(question: str, shown: list[str], words: list[tuple[str, ...]]) -> None:
    phrases = key_phrases(question)
    assert [phrase.shown for phrase in phrases] == shown
    assert [phrase.words for phrase in phrases] == words


@pytest.mark.parametrize(
    "question",
    [
        "How does citeflow work?",  # two content words: nothing to search that the question does not
        "Ida Marsh trained at what naval pilots' academy?",  # no key phrase left
    ],
)
def test_no_facets_that_repeat_the_question(question: str) -> None:
    plan = PLANNER.plan(question, 5)
    assert len(plan) < 3
    assert len({frozenset(content_words(sub.query)) for sub in plan}) == len(plan)


def test_name_spans() -> None:
    assert name_spans(
        "The Curse of the Jade Scorpion starred E. B. White and Géza von Cziffra, not Indian actors."
    ) == [
        "Curse of the Jade Scorpion",
        "E. B. White",
        "Géza von Cziffra",
    ]


def make_page(text: str, page_id: str = "p1") -> Page:
    return Page(
        id=page_id,
        url=f"https://example.org/{page_id}",
        canonical_url=f"https://example.org/{page_id}",
        title=page_id,
        text=text,
        content_hash=hashlib.sha256(text.encode()).hexdigest(),
        origin=Origin.ingested,
        stored_at=datetime(2024, 1, 1, tzinfo=UTC),
    )


HELEN_HUNT = make_page(
    "Helen Elizabeth Hunt (born June 15, 1963) is an American actress, director, and screenwriter. "
    "Ok. "
    "Hunt had a number of early roles in film and on television. "
    'She starred in the sitcom "Mad About You" for seven years. '
    "She later directed a film of her own."
)


def test_verifier_picks_the_gold_like_sentence_first() -> None:
    subquestion = SubQuestion(
        id="q2", position=1, text="?", query="actress who starred in what for seven years"
    )
    drafts = ExtractiveVerifier().extract(subquestion, HELEN_HUNT, 2)
    assert [draft.text for draft in drafts] == [
        'She starred in the sitcom "Mad About You" for seven years.',
        "Helen Elizabeth Hunt (born June 15, 1963) is an American actress, director, and screenwriter.",
    ]
    assert all(draft.quote == draft.text and draft.quote in HELEN_HUNT.text for draft in drafts)


def test_verifier_respects_the_limit_skips_fragments_and_quotes_verbatim() -> None:
    subquestion = SubQuestion(id="q1", position=0, text="?", query="Helen Hunt film roles")
    drafts = ExtractiveVerifier().extract(subquestion, HELEN_HUNT, 10)
    assert len(drafts) == 4
    assert "Ok." not in [draft.text for draft in drafts]
    claims = verify_drafts(drafts, HELEN_HUNT, "q1", "C1", 20)
    assert all(claim.status is ClaimStatus.verified for claim in claims)
    [best] = ExtractiveVerifier().extract(subquestion, HELEN_HUNT, 1)
    assert best.text == "Hunt had a number of early roles in film and on television."


MARKDOWN = make_page(
    "# How citeflow verifies a quote\n\n"
    "A claim is kept only if its quote is found in the stored text of the page.\n\n"
    "## The quote check\n\n"
    "```python\n"
    "quote = normalise(quote)  # the quote check\n"
    "This line in a code fence reads like a quote check sentence.\n"
    "```\n\n"
    "| check | what the quote needs |\n"
    "|-------|----------------------|\n"
    "| found | the quote is in the page text |\n\n"
    "- A quote shorter than twenty characters is rejected by the check.\n"
    "- `quote_start`, `quote_end` (quote offsets).\n",
    "markdown",
)


def test_verifier_proposes_prose_only_from_a_markdown_page() -> None:
    subquestion = SubQuestion(id="q1", position=0, text="?", query="quote check page")
    drafts = ExtractiveVerifier().extract(subquestion, MARKDOWN, 10)
    # Headings, fenced code, table rows and the list of field names all share the query's words;
    # none is a claim. The list item is quoted without its marker.
    assert [draft.quote for draft in drafts] == [
        "A claim is kept only if its quote is found in the stored text of the page.",
        "A quote shorter than twenty characters is rejected by the check.",
    ]
    claims = verify_drafts(drafts, MARKDOWN, "q1", "C1", 20)
    assert all(claim.status is ClaimStatus.verified for claim in claims)
    assert all(MARKDOWN.text[claim.quote_start : claim.quote_end] == claim.quote for claim in claims)


def test_verifier_gives_nothing_for_a_page_found_on_one_stray_word() -> None:
    stray = SubQuestion(id="q1", position=0, text="?", query="seven tornado outbreaks in Alabama")
    assert ExtractiveVerifier().extract(stray, HELEN_HUNT, 3) == []
    # A one-word query needs its one word, and two words of a longer query are enough.
    one_word = SubQuestion(id="q1", position=0, text="?", query="sitcom")
    assert len(ExtractiveVerifier().extract(one_word, HELEN_HUNT, 3)) == 3
    two = stray.model_copy(update={"query": "seven tornado outbreaks in Alabama sitcom"})
    assert ExtractiveVerifier().extract(two, HELEN_HUNT, 1)[0].text.startswith("She starred in the sitcom")


def test_verifier_gives_nothing_for_an_unrelated_page() -> None:
    subquestion = SubQuestion(id="q1", position=0, text="?", query="tornado outbreak Alabama 1932")
    assert ExtractiveVerifier().extract(subquestion, HELEN_HUNT, 3) == []
    assert ExtractiveVerifier().extract(subquestion, make_page(""), 3) == []


SUBQUESTIONS = [
    SubQuestion(id="q1", position=0, text="Q?", query="Q"),
    SubQuestion(id="q2", position=1, text="What is known about Tomas Brell?", query="Brell"),
]


def verified(claim_id: str, subquestion_id: str, text: str, source_id: str, start: int = 0) -> Claim:
    return Claim(
        id=claim_id,
        subquestion_id=subquestion_id,
        page_id=f"page-{source_id}",
        page_hash="h",
        text=text,
        quote=text,
        quote_start=start,
        quote_end=start + len(text),
        status=ClaimStatus.verified,
        source_id=source_id,
    )


CLAIMS = [
    verified("C2.1", "q2", "Tomas Brell (born 12 May 1951) is a Danish-Swedish film director.", "S1"),
    verified("C1.1", "q1", "Anika Sorvald is a Vestmark film and documentary director and producer.", "S2"),
    # The same sentence on a mirror page: written once only.
    verified("C1.2", "q1", "Anika Sorvald is a Vestmark film and documentary director and producer.", "S3"),
    verified("C2.2", "q2", "Brell's films have grossed over $2.1 billion worldwide.", "S1", 80),
]
SOURCES = [
    Source(
        id=f"S{n}",
        page_id=f"page-S{n}",
        url=f"https://example.org/{n}",
        title=title,
        stored_at=datetime(2024, 1, 1, tzinfo=UTC),
    )
    for n, title in ((1, "Tomas Brell"), (2, "Anika Sorvald"), (3, "Anika Sorvald (mirror)"))
]
BOTH = "Are Tomas Brell and Anika Sorvald both film directors?"


def request(**update: object) -> SynthesisInput:
    base = SynthesisInput(question=BOTH, subquestions=SUBQUESTIONS, claims=CLAIMS, sources=SOURCES)
    return base.model_copy(update=update)


def test_synthesiser_answers_first_and_passes_the_mechanical_critique() -> None:
    engine = extractive_engine()
    draft = engine.synthesiser.write(request())
    # A verdict citing the claims that decide it, then those claims; nothing else.
    assert [(s.section, s.cites, s.text) for s in draft.sentences] == [
        ("", ["S1", "S2"], "Yes: Tomas Brell and Anika Sorvald are both film directors."),
        ("", ["S1"], CLAIMS[0].text),
        ("", ["S2"], CLAIMS[1].text),
    ]
    critique = engine.critic.review(request(), draft)
    assert critique == mechanical_critique(draft, CLAIMS)
    assert critique.approved


def test_synthesiser_says_nothing_is_an_answer_when_a_side_has_no_page() -> None:
    draft = extractive_engine().synthesiser.write(request(claims=CLAIMS[1:3]))
    assert all(sentence.section != "" for sentence in draft.sentences)
    assert [s.text for s in draft.sentences] == [CLAIMS[1].text]  # related evidence, written once


def test_synthesiser_skips_rejected_and_unnumbered_claims() -> None:
    rejected = CLAIMS[0].model_copy(
        update={"id": "C9.1", "status": ClaimStatus.rejected, "text": "Brell lives on Mars now."}
    )
    unnumbered = CLAIMS[3].model_copy(
        update={"id": "C9.2", "source_id": None, "text": "Brell owns a very large dog."}
    )
    draft = extractive_engine().synthesiser.write(request(claims=[rejected, unnumbered]))
    assert draft.sentences == []


def test_revision_drops_the_flagged_sentences() -> None:
    synthesiser = extractive_engine().synthesiser
    first = synthesiser.write(request())
    critique = Critique(approved=False, problems=[SentenceProblem(index=1, check=SentenceCheck.unsupported)])
    revised = synthesiser.write(request(previous=first, critique=critique))
    assert revised.sentences == [first.sentences[0], first.sentences[2]]


def test_engine_is_named_extractive() -> None:
    assert extractive_engine().name == "extractive"
