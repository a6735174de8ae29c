"""Answers from verified claims by rules: chains through a bridge entity, verdicts, follow-ups, not found."""

from __future__ import annotations

from datetime import UTC, datetime

from citeflow.checks import mechanical_critique
from citeflow.contracts import Claim, ClaimStatus, Draft, Source, SubQuestion, SynthesisInput
from citeflow.extractive import ExtractivePlanner
from citeflow.extractive.answer import (
    Answerer,
    bridges,
    chains,
    gather,
    is_about,
    is_named,
    names_title,
    title_subjects,
)
from citeflow.extractive.question import read_question

READ = datetime(2024, 1, 1, tzinfo=UTC)


def page(source_id: str, title: str, *sentences: str, subquestion: str = "q1") -> tuple[Source, list[Claim]]:
    """A source and its verified claims, one per sentence, at increasing offsets (the first defines it)."""
    url = f"https://example.org/{source_id}"
    source = Source(id=source_id, page_id=f"p-{source_id}", url=url, title=title, stored_at=READ)
    claims, start = [], 0
    for n, sentence in enumerate(sentences, start=1):
        claims.append(
            Claim(
                id=f"C{source_id[1:]}.{n}",
                run_id="r",
                subquestion_id=subquestion,
                page_id=source.page_id,
                page_hash="h",
                text=sentence,
                quote=sentence,
                quote_start=start,
                quote_end=start + len(sentence),
                status=ClaimStatus.verified,
                source_id=source_id,
            )  # fmt: skip
        )
        start += len(sentence) + 1
    return source, claims


def request(question: str, *pages: tuple[Source, list[Claim]]) -> SynthesisInput:
    return SynthesisInput(
        question=question,
        subquestions=[SubQuestion(id="q1", position=0, text=question, query=question)],
        claims=[claim for _, claims in pages for claim in claims],
        sources=[source for source, _ in pages],
    )


BORN = "At the 2011 census, what was the population of the city where Kerry Saxby-Junna was born?"
KERRY = page(
    "S1",
    "Kerry Saxby-Junna",
    "Kerry-Anne Saxby-Junna (born 2 June 1961) is a retired Australian race walker.",
    "She was born in Young, New South Wales and grew up in Ballina, New South Wales.",
)
YOUNG = page(
    "S2",
    "Young, New South Wales",
    "Young is a town in the South West Slopes region of New South Wales, Australia.",
    "At the 2011 census, Young had a population of 6,960.",
    subquestion="q2",
)
BALLINA = page(
    "S3", "Ballina, New South Wales", "Ballina is a town in the Northern Rivers region of New South Wales."
)


def answer(question: str, *pages: tuple[Source, list[Claim]]) -> Draft:
    from citeflow.extractive import ExtractiveSynthesiser

    return ExtractiveSynthesiser().write(request(question, *pages))


def test_titles_name_their_subject() -> None:
    assert title_subjects("Young, New South Wales") == ["Young, New South Wales", "Young"]
    assert title_subjects("Charmed (TV series)") == ["Charmed"]
    assert title_subjects("Christopher Nolan - Wikipedia") == ["Christopher Nolan"]
    assert is_named("Charmed (TV series)", "Charmed") and not is_named("Cotula mexicana", "Cotula")
    assert is_about("Cotula mexicana", "Cotula")
    assert names_title(
        "The manuscript for Flute Sonata in C major, BWV 1033 is ...", "Flute Sonata in C major, BWV 1033"
    )


def test_the_answer_is_reached_through_the_bridge_entity() -> None:
    draft = answer(BORN, KERRY, YOUNG, BALLINA)
    first, *rest = draft.sentences
    assert (first.section, first.cites, first.text) == ("", ["S2"], YOUNG[1][1].text)
    # Then the claim that leads there: the anchor page's sentence naming the bridge.
    assert rest[0].text == KERRY[1][1].text and rest[0].section == "q1"
    assert "S3" not in {
        cite for sentence in draft.sentences for cite in sentence.cites
    }  # does not bear on it
    assert mechanical_critique(draft, request(BORN, KERRY, YOUNG, BALLINA).claims).approved


def test_without_the_bridge_page_there_is_no_answer_only_related_evidence() -> None:
    draft = answer(BORN, KERRY, BALLINA)
    assert draft.sentences and all(sentence.section != "" for sentence in draft.sentences)


def test_with_the_question_pages_removed_nothing_is_an_answer() -> None:
    # The pages left share the question's words ("census", "population") but are about another town.
    other = page("S4", "Yass, New South Wales", "At the 2011 census, Yass had a population of 6,506.")
    draft = answer(BORN, other, BALLINA)
    assert draft.sentences and all(sentence.section != "" for sentence in draft.sentences)


def test_bridges_are_the_names_the_anchor_claims_lead_to_with_what_is_still_missing() -> None:
    evidence = request(BORN, KERRY, BALLINA)
    found = bridges(read_question(BORN), gather(evidence), 2)
    assert found[0].name == "Young, New South Wales"
    assert found[0].query == "Young, New South Wales 2011 census population city"
    planned = ExtractivePlanner().follow_up(evidence, 2)
    assert planned[0].text == "What is known about Young, New South Wales?"
    assert len(planned) <= 2
    # A comparison names both its sides: nothing to follow up.
    assert (
        ExtractivePlanner().follow_up(request("Are Young and Ballina both towns?", YOUNG, BALLINA), 3) == []
    )


def test_a_page_found_by_description_is_followed_up_by_its_own_name() -> None:
    question = (
        "The runner-up in the 1999 World Drivers' Championship appears on the cover of what video game?"
    )
    irvine = page(
        "S1",
        "Eddie Irvine",
        "He was a Formula One driver, and runner-up in the 1999 World Drivers' Championship, for Ferrari.",
    )
    found = bridges(read_question(question), gather(request(question, irvine)), 3)
    assert found[0].name == "Eddie Irvine"  # search for pages that name him: the game's cover does


NOLAN = page(
    "S1", "Christopher Nolan", "Christopher Nolan (born 30 July 1970) is an English-American film director."
)
KALATHIL = page(
    "S2", "Sathish Kalathil", "Sathish Kalathil is an Indian film and documentary director and producer."
)
VIDOR = page(
    "S1",
    "King Vidor",
    "King Wallis Vidor (February 8, 1894 – November 1, 1982) was an American film director.",
)
CZIFFRA = page(
    "S2", "Géza von Cziffra", "Géza von Cziffra was a Hungarian-born Austrian film director and screenwriter."
)


def test_both_is_yes_only_when_each_side_shows_the_predicate() -> None:
    yes = answer("Are Christopher Nolan and Sathish Kalathil both film directors?", NOLAN, KALATHIL)
    assert [s.text for s in yes.sentences][0] == "The answer is yes."
    no = answer("Are King Vidor and Géza von Cziffra both American directors?", VIDOR, CZIFFRA)
    assert [s.text for s in no.sentences] == ["The answer is no.", VIDOR[1][0].text, CZIFFRA[1][0].text]
    # A side with no page of its own: not an answer, whatever the other side says.
    missing = answer("Are Christopher Nolan and Sathish Kalathil both film directors?", NOLAN)
    assert all(sentence.section != "" for sentence in missing.sentences)


def test_same_compares_the_names_next_to_the_noun() -> None:
    question = "Are Nantong and Jingdezhen situated in the same province?"
    nantong = page("S1", "Nantong", "Nantong is a prefecture-level city in Jiangsu province, China.")
    jingdezhen = page(
        "S2", "Jingdezhen", "Jingdezhen is a prefecture-level city in northeastern Jiangxi province, China."
    )
    assert answer(question, nantong, jingdezhen).sentences[0].text == "The answer is no."
    yangzhou = page(
        "S2", "Yangzhou", "Yangzhou is a prefecture-level city in central Jiangsu province, China."
    )
    assert answer("Are Nantong and Yangzhou in the same province?", nantong, yangzhou).sentences[0].text == (
        "The answer is yes."
    )
    # "the United States" is not "a state": with no state named, no verdict.
    question = "Are Watertown Airport and Alexandria Airport in the same state?"
    watertown = page(
        "S1",
        "Watertown Airport",
        "Watertown Airport is an airport in Jefferson County, New York, United States.",
    )
    alexandria = page(
        "S2",
        "Alexandria Airport",
        "Alexandria Airport is an airport in Rapides Parish, Louisiana, United States.",
    )
    assert not answer(question, watertown, alexandria).sentences[0].text.startswith("The answer is")


def test_choice_by_dates_names_the_earlier_and_cites_it() -> None:
    question = "Who is the oldest, Sid Haig or Vic Darchinyan?"
    haig = page(
        "S1",
        "Sid Haig",
        "Sidney Eddie Mosesian (born July 14, 1939), better known as Sid Haig, is an American actor.",
    )
    vic = page(
        "S2",
        "Vic Darchinyan",
        "Vic Darchinyan (born 7 January 1976) is an Armenian-Australian professional boxer.",
    )
    draft = answer(question, vic, haig)
    assert (draft.sentences[0].text, draft.sentences[0].cites) == ("The answer is Sid Haig.", ["S1"])
    assert mechanical_critique(draft, request(question, vic, haig).claims).approved
    younger = answer("Who is younger, Sid Haig or Vic Darchinyan?", vic, haig)
    assert younger.sentences[0].text == "The answer is Vic Darchinyan."


def test_a_claim_names_a_page_by_its_whole_subject() -> None:
    from citeflow.extractive.answer import names_page

    [leland] = gather(
        request("Q?", page("S1", "Chloë Leland", "She is the daughter of director David Leland."))
    )
    assert not names_page(leland, "Leland, North Carolina")  # "Leland" alone is another subject
    [kerry, born] = gather(request("Q?", KERRY))
    assert names_page(born, "Young, New South Wales") and not names_page(kerry, "Young, New South Wales")


def test_in_what_year_wants_a_year_the_question_does_not_give() -> None:
    from citeflow.extractive.answer import offers_answer

    question = "In what year was the man who resigned before the election of 2000 born?"
    election = page(
        "S1", "Election, 2000", "The election was held on 31 July 2000, after Ezer Weizman resigned."
    )
    weizman = page(
        "S2", "Ezer Weizman", "Ezer Weizman (15 June 1924 – 24 April 2005) was the seventh President."
    )
    shape = read_question(question)
    [held] = gather(request(question, election))
    [lived] = gather(request(question, weizman))
    assert not offers_answer(held, shape) and offers_answer(lived, shape)
    answerer = Answerer(request(question, election, weizman), shape)
    [best, *_] = chains(shape, answerer.evidence, answerer.weights)
    assert [link.claim.text for link in best.links] == [held.claim.text, lived.claim.text]


def test_a_comparison_also_shows_what_each_side_is() -> None:
    question = "Which singer is American, Mark King or Nick Hexum?"
    king = page(
        "S1", "Mark King", "Mark King (born 1958) is an English musician.", "He plays bass and sings."
    )
    hexum = page(
        "S2",
        "Nick Hexum",
        'Nicholas Lofton "Nick" Hexum (born 1970) is a musician.',
        "Hexum is an American singer and songwriter.",
    )
    texts = [sentence.text for sentence in answer(question, king, hexum).sentences]
    assert texts[0] == "The answer is Nick Hexum."
    assert hexum[1][0].text in texts  # the full name the answer is known by
