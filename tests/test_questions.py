"""Reading a question by rules: its form, what it asks for, its sides, and the words its answer repeats."""

from __future__ import annotations

import pytest

from citeflow.extractive.question import Asks, Form, Order, name_spans, question_sides, read_question
from citeflow.text import stem


@pytest.mark.parametrize(
    ("question", "form", "asks"),
    [
        ("Are Christopher Nolan and Sathish Kalathil both film directors?", Form.both, Asks.yes_no),
        ("Are Nantong and Jingdezhen situated in the same province ?", Form.same, Asks.yes_no),
        ("Who is the oldest, Sid Haig or Vic Darchinyan?", Form.choice, Asks.thing),
        (
            "Who directed the film that was shot in or around Leland, North Carolina in 1986",
            Form.open,
            Asks.person,
        ),
        ("Scott Howell is a consultant who has worked with the mayor of what city?", Form.open, Asks.place),
        ("In what year was the man that resigned as the president of Israel born?", Form.open, Asks.time),
        ("How many times was Deltha Lee O'Neal, III selected for the all-star game?", Form.open, Asks.number),
        # A "who" after a noun opens a clause; the question word that asks is the later one.
        (
            "Lover Come Back contained the actress who played which part on The Brady Bunch?",
            Form.open,
            Asks.thing,
        ),
        ("What show does a retired Orlando Magic player, who missed a season, host?", Form.open, Asks.thing),
        ("Thumb Wrestling Federation is on a network founded by who?", Form.open, Asks.person),
        # "Do Lafzon Ki Kahani" is a film, not a yes-or-no question: the question word comes later.
        (
            "Do Lafzon Ki Kahani, is a 2016 film, it is a remake of Always, released in which year?",
            Form.open,
            Asks.time,
        ),
    ],
)
def test_form_and_what_is_asked(question: str, form: Form, asks: Asks) -> None:
    shape = read_question(question)
    assert (shape.form, shape.asks) == (form, asks)


def test_sides_predicate_and_order() -> None:
    both = read_question("Are Christopher Nolan and Sathish Kalathil both film directors?")
    assert both.sides == ("Christopher Nolan", "Sathish Kalathil")
    assert both.predicate == {stem("film"), stem("directors")}
    same = read_question("Are Nantong and Jingdezhen situated in the same province ?")
    assert same.same_noun == "province"
    oldest = read_question("Who is the oldest, Sid Haig or Vic Darchinyan?")
    assert oldest.sides == ("Sid Haig", "Vic Darchinyan") and oldest.order is Order.earliest
    younger = read_question("Which band was formed more recently, The Exies or Circus Diablo?")
    assert younger.order is Order.latest
    assert question_sides("Do Lafzon Ki Kahani and Always, released in which year?") == []


def test_the_slot_is_what_the_answer_repeats_next_to_the_question_word() -> None:
    slot = dict(
        read_question("The manuscript is in the hand of a German musician whose godfather is whom?").slot
    )
    assert slot[stem("godfather")] == 1.0 and slot[stem("musician")] < 1.0
    # After an inverted auxiliary, the verb that asks ends the question; a name there does not.
    born = dict(read_question("In what year was the man that resigned as the president of Israel born?").slot)
    assert born[stem("born")] == 1.0
    role = dict(read_question("What role did Ed Roland perform in Counting Crows?").slot)
    assert stem("crows") not in role and stem("role") in role
    # The question's names are left out: every sentence of their own pages repeats them.
    times = dict(read_question("How many times was Deltha Lee O'Neal selected for the game?").slot)
    assert stem("deltha") not in times and stem("times") in times


def test_relation_leaves_names_and_asking_words_out() -> None:
    shape = read_question("What is the name of the pop band founded by one of the stars of Aisa Yeh Jahaan?")
    assert shape.entities == ("Aisa Yeh Jahaan",)
    assert shape.relation == {stem("pop"), stem("band"), stem("founded"), stem("stars")}


def test_a_bracket_ends_a_name() -> None:
    assert name_spans("He played for the Philadelphia Eagles (1941, 1945–1949).") == ["Philadelphia Eagles"]
    assert name_spans("Big Hero 6 and BWV 1033 were listed.") == ["Big Hero 6", "BWV 1033"]
