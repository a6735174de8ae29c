"""Reading a question by rules: its form, what it asks for, its sides, and the words its answer repeats.

Every question here is written for the test, with made-up names: the method must hold on questions it
was never tuned on.
"""

from __future__ import annotations

import pytest

from citeflow.extractive.question import (
    Asks,
    Form,
    Order,
    name_spans,
    question_entities,
    question_sides,
    read_question,
    verbless_head,
)
from citeflow.extractive.rank import relation_stems
from citeflow.text import stem


@pytest.mark.parametrize(
    ("question", "form", "asks"),
    [
        ("Are Tomas Brell and Anika Sorvald both landscape painters?", Form.both, Asks.yes_no),
        ("Are Oskarby and Velmora situated in the same region?", Form.same, Asks.yes_no),
        ("Who is the oldest, Perrin Adler or Lisette Vaugh?", Form.choice, Asks.thing),
        ("Who was born later, Tomas Brell or Anika Sorvald?", Form.choice, Asks.thing),
        ("Who founded the record label that signed the Gravel Saints?", Form.open, Asks.person),
        ("The harbour pilot Ida Marsh worked in what city?", Form.open, Asks.place),
        ("In what year was the painter of The Salt Barges born?", Form.open, Asks.time),
        ("How many albums did the Gravel Saints release?", Form.open, Asks.number),
        ("The ferry Norrsken was built by a yard founded by who?", Form.open, Asks.person),
        # Verbless templates: the head noun says what is asked.
        ("Place of birth of the performer of song Quiet Harbour Lights?", Form.open, Asks.place),
        ("Date of death of the director of film The Glass Orchard?", Form.open, Asks.time),
        ("Nationality of the author of Winter Ledger?", Form.open, Asks.thing),
        # Possessives and family relations.
        ("What nationality is Maren Holt's husband?", Form.open, Asks.thing),
        ("Who is Edwin Carrow's paternal grandfather?", Form.open, Asks.person),
        ("Who is the mother of the composer of the Harrowgate Suite?", Form.open, Asks.person),
    ],
)
def test_form_and_what_is_asked(question: str, form: Form, asks: Asks) -> None:
    shape = read_question(question)
    assert (shape.form, shape.asks) == (form, asks)


def test_a_verbless_question_asks_its_head_and_its_head_names_no_page() -> None:
    assert verbless_head("Place of birth of the performer of song Quiet Harbour Lights?") == "Place of birth"
    assert verbless_head("Date of death of the director of film The Glass Orchard?") == "Date of death"
    assert verbless_head("Who directed the film?") == ""
    shape = read_question("Place of birth of the performer of song Quiet Harbour Lights?")
    assert shape.entities == ("Quiet Harbour Lights",)  # "Place" is no name
    assert shape.head == "Place of birth"
    # The answer's sentence says "born in": the head's relation word is in the slot, the kind noun is not.
    assert dict(shape.slot) == {stem("born"): 1.0}
    assert stem("place") not in shape.relation and stem("perform") in shape.relation


def test_relation_words_meet_their_synonyms() -> None:
    assert relation_stems("place of birth") & relation_stems("she was born in Oskarby")
    assert relation_stems("her husband") & relation_stems("she married Ivo Lund")
    assert relation_stems("paternal grandfather") <= relation_stems("his father was the grandson of")
    assert relation_stems("the performer of the song") & relation_stems("recorded by the singer")
    assert not relation_stems("born") & relation_stems("died")


def test_sides_predicate_and_order() -> None:
    both = read_question("Are Tomas Brell and Anika Sorvald both landscape painters?")
    assert both.sides == ("Tomas Brell", "Anika Sorvald")
    assert both.predicate == {stem("landscape"), stem("painters")}
    assert both.predicate_text == "landscape painters"
    later = read_question("Who was born later, Tomas Brell or Anika Sorvald?")
    assert later.sides == ("Tomas Brell", "Anika Sorvald") and later.order is Order.latest
    assert stem("born") in later.predicate
    oldest = read_question("Who is the oldest, Perrin Adler or Lisette Vaugh?")
    assert oldest.order is Order.earliest
    recent = read_question("Which band was formed more recently, The Gravel Saints or Low Tide Choir?")
    assert recent.order is Order.latest
    assert question_sides("Do Lanterns Over Kell and Mira, released in which year?") == []


def test_both_films_with_directors_from_the_same_country_reads_each_sides_role() -> None:
    shape = read_question(
        "Do both films The Glass Orchard and Winter Parade have directors from the same country?"
    )
    assert shape.form is Form.same and shape.same_noun == "country"
    assert shape.sides == ("Glass Orchard", "Winter Parade")  # "films" says what the sides are
    assert stem("directors") in shape.predicate  # the role: each side's second hop


def test_names_that_end_like_nationalities_are_names_where_a_name_stands() -> None:
    shape = read_question("Which is older, Julian or Adrian?")
    assert shape.form is Form.choice and shape.sides == ("Julian", "Adrian")
    # Before its noun, a nationality adjective is no name.
    assert name_spans("Ivo Lund is a Danish shipbuilder.") == ["Ivo Lund"]


def test_a_question_opening_word_is_grammar_not_a_name() -> None:
    assert question_entities("Besides Oskarby, which town hosted the regatta?") == ["Oskarby"]
    assert question_entities("Notable residents of Velmora include which painter?") == ["Velmora"]
    assert question_entities("Name the ship that Ida Marsh piloted.") == ["Ida Marsh"]
    assert question_entities("What nationality is Maren Holt's husband?") == ["Maren Holt"]


def test_the_slot_is_what_the_answer_repeats_next_to_the_question_word() -> None:
    slot = dict(read_question("The sonata was written for a cellist whose teacher is whom?").slot)
    assert slot[stem("teacher")] == 1.0 and slot[stem("cellist")] < 1.0
    # After an inverted auxiliary, the verb that asks ends the question; a name there does not.
    born = dict(read_question("In what year was the woman who founded Harrow Press born?").slot)
    assert born[stem("born")] == 1.0
    role = dict(read_question("What instrument did Ivo Lund play in Low Tide Choir?").slot)
    assert stem("choir") not in role and stem("instrument") in role


def test_relation_leaves_names_and_asking_words_out() -> None:
    shape = read_question("What is the name of the choir founded by one of the singers of Low Tide Choir?")
    assert shape.entities == ("Low Tide Choir",)
    assert shape.relation == relation_stems("choir founded singers") - relation_stems("Low Tide Choir")


def test_a_bracket_ends_a_name() -> None:
    assert name_spans("He sailed for the Velmora Rowing Club (1931, 1935–1939).") == ["Velmora Rowing Club"]
    assert name_spans("Opus 12 and Suite 3 were listed.") == ["Opus 12", "Suite 3"]


def test_the_direction_of_a_choice_comes_from_its_comparative() -> None:
    assert read_question("Which town has the larger population, Oskarby or Rusk?").order is Order.most
    assert (
        read_question("Which band has fewer members, Low Tide Choir or Gravel Saints?").order is Order.least
    )
    assert read_question("Who was born earlier, Ida Marsh or Otto Benn?").order is Order.earliest
    # Saying "born" sets no direction: the sides' places are compared, not their dates.
    assert read_question("Who was born in Rusk, Ida Marsh or Otto Benn?").order is None


def test_a_name_may_open_a_question_when_a_connector_leads_on_to_its_next_word() -> None:
    assert question_entities("Lanterns of Kell is the second album by a singer from what state?") == [
        "Lanterns of Kell"
    ]
    assert question_entities("Place of birth of the singer of Lanterns of Kell?") == ["Lanterns of Kell"]
