"""Reading a question by rules: the names it mentions, the two sides it compares, its key phrases, and
what it asks for (yes or no, a person, a place, a date, a number, a thing).

The extractive planner searches for what these functions find, and the extractive synthesiser checks
the evidence against it. Rough by nature: every function here must give something usable, never fail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from citeflow.extractive.rank import canonical, relation_stems
from citeflow.text import STOPWORDS, content_stems, normalise

# The subject of "How does X ...?" has at most this many words: in a longer run of content words
# ("How does the evidence store keep old pages?") the verb is somewhere inside it.
SUBJECT_MAX_WORDS = 3
# Lower-case words that may sit inside a name: "Haymo of Faversham", "Géza von Cziffra".
_NAME_CONNECTORS = frozenset(
    [
        "of",
        "the",
        "von",
        "van",
        "de",
        "der",
        "den",
        "del",
        "della",
        "la",
        "le",
        "du",
        "da",
        "di",
        "dos",
        "das",
        "y",
        "ap",
        "bin",
        "ibn",
        "al",
        "&",
    ]
)
# Prepositions that may open a question ("Besides X, ...", "Apart from X"): grammar, never part of a name.
_OPENING_PREPOSITIONS = frozenset(
    "about above across after against along among apart around before behind below beside besides between "  # noqa: SIM905
    "beyond despite during except excluding following including inside like near outside regarding since "
    "through throughout toward towards under unlike until upon within without".split()
)
# Nationality and language adjectives by their endings ("Indian", "Danish", "Japanese"): read as an
# adjective, not a name, only where an adjective stands, before a lower-case word ("Indian film").
DEMONYM = re.compile(r"(?:ian|ish|ese|ean|can|ern)$|^(?:english|french|dutch|welsh|german|greek|thai|swiss)$")
INITIALS = re.compile(r"(?:[^\W\d_]\.)+")
YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})s?\b")
QUOTED = re.compile(r'"([^"]{2,}?)"')
_SINGULAR_AUX = {
    "are": "Is",
    "is": "Is",
    "were": "Was",
    "was": "Was",
    "do": "Does",
    "does": "Does",
    "did": "Did",
}
_PAIR = re.compile(r"^(Are|Is|Were|Was|Do|Does|Did)\s+(both\s+)?(.+?)\s+and\s+(.+?)\s*\?*$", re.IGNORECASE)
_PREPOSITIONS = frozenset(["in", "of", "from", "at", "on", "with", "for", "by", "to", "as"])
_AGE = re.compile(r"\b(older|oldest|younger|youngest|born|died|age)\b", re.IGNORECASE)
_FIRST = re.compile(r"\b(first|earlier|earliest)\b", re.IGNORECASE)
_EVENT = re.compile(r"\b(formed|founded|published|released|established|created|built|opened|started)\b")
# A key phrase of the question follows one of these: "a quote", "on the page". ("that" is left out: in a
# question it mostly opens a clause, "check that a quote appears".)
_DETERMINERS = frozenset(
    "a an the this these those its their his her our your my each every any some most several".split()  # noqa: SIM905
)
# Participles that do not end in -ed: "a painter known for", "the singer born in".
_PARTICIPLES = frozenset(
    "known born made taken given written seen done built held won sold told found grown shown drawn".split()  # noqa: SIM905
)
_SINGULAR_DETERMINERS = frozenset(["a", "an", "this", "each", "every"])
_PHRASE_OPENERS = _DETERMINERS | _PREPOSITIONS | frozenset(["about", "into", "during", "between", "through"])
# "What city", "which college": the kind of thing asked for, not a topic to search.
_ASKING = frozenset(["what", "which", "whose", "how", "many", "much"])
# "How does citeflow check ...": after these the first words are the subject, then its verb.
_MECHANISM_OPENERS = frozenset(["how", "why", "what"])
_DO_AUXILIARIES = frozenset(["do", "does", "did", "can", "could", "will", "would", "should"])
_PHRASE_TOKEN = re.compile(r"[\w'-]+|[^\w\s]")


@dataclass(frozen=True)
class _Token:
    text: str  # stripped of surrounding punctuation
    ends_span: bool  # followed by a comma, question mark, quote or similar: a name stops here
    opens: bool = False  # after an opening bracket or quote: a name does not run on into it


def _tokens(text: str) -> list[_Token]:
    tokens = []
    for raw in text.split():
        stripped = raw.strip("\"'()[]{},;:?!")
        initial = bool(INITIALS.fullmatch(stripped))  # "E.", "D.P.": the stop is part of the name
        if stripped.endswith(".") and not initial:
            stripped = stripped[:-1]
        possessive = re.search(r"['\u2019]s?$", stripped) is not None and len(stripped) > 2
        if possessive:  # "Maren Holt's husband": the name ends before its possessive
            stripped = re.sub(r"['\u2019]s?$", "", stripped)
        ends = raw[-1] in ',;:?!()"' or (raw.endswith(".") and not initial) or possessive
        tokens.append(_Token(stripped, ends, raw[0] in '([{"'))
    return tokens


def _is_capitalised(word: str) -> bool:
    letters = [char for char in word if char.isalpha()]
    return bool(letters) and letters[0].isupper() and word[0].isalnum()


def _continues_name(tokens: list[_Token], index: int) -> bool:
    """Whether connectors from `index` on lead to a capitalised word: "of the Jade Scorpion"."""
    while index < len(tokens) and tokens[index].text.casefold() in _NAME_CONNECTORS:
        if tokens[index].ends_span:
            return False
        index += 1
    return index < len(tokens) and _is_capitalised(tokens[index].text)


def _is_modifier(word: str, following: _Token | None) -> bool:
    """A one-word span that is a nationality adjective before its noun: "Indian film photographer"."""
    return (
        bool(DEMONYM.search(word.casefold()))
        and following is not None
        and following.text[:1].islower()
        and following.text.casefold() not in STOPWORDS
    )


def name_spans(text: str, question: bool = False) -> list[str]:
    """Capitalised multi-word spans and single names ("Christopher Nolan", "Haymo of Faversham").

    In a `question`, the first word is capitalised by grammar: alone before a lower-case word ("Name the
    ...", "Place of birth of ...", "Notable alumni of ...") or as an opening preposition ("Besides X")
    it names nothing."""
    spans: list[tuple[list[str], int]] = []  # words, and the index of the token after them
    current: list[str] = []
    tokens = _tokens(text)
    for index, token in enumerate(tokens):
        word = token.text
        if token.opens and current:  # "the Philadelphia Eagles (1941, ...)": the bracket ends the name
            spans.append((current, index))
            current = []
        opening = question and index == 0
        if opening and word.casefold() in _OPENING_PREPOSITIONS:
            continue
        if (
            opening
            and tokens[1:2]
            and tokens[1].text[:1].islower()
            and not token.ends_span
            and not (tokens[1].text.casefold() in _NAME_CONNECTORS and _continues_name(tokens, 1))
        ):
            continue  # "Name the ...", "Place of birth of ...", but "Transfiguration of Vincent is ..."
        if _is_capitalised(word) and not (not current and word.casefold() in STOPWORDS):
            current.append(word)
        elif current and word[:1].isdigit():
            current.append(word)  # "Big Hero 6", "BWV 1033"
        elif current and word.casefold() in _NAME_CONNECTORS and _continues_name(tokens, index):
            current.append(word)
            continue
        else:
            if current:
                spans.append((current, index))
            current = []
            continue
        if token.ends_span:
            spans.append((current, len(tokens)))  # punctuation ends it: nothing follows as its noun
            current = []
    if current:
        spans.append((current, len(tokens)))
    names = []
    for span, after in spans:
        while span and (span[-1].casefold() in _NAME_CONNECTORS or span[-1].casefold() in STOPWORDS):
            span = span[:-1]
        following = tokens[after] if after < len(tokens) else None
        if len(span) == 1 and (len(span[0]) < 2 or _is_modifier(span[0], following)):
            continue
        if span:
            names.append(" ".join(span))
    return names


def _singular_phrase(phrase: str) -> str:
    """ "film directors" -> "a film director"; phrases not led by a plural noun stay as they are."""
    words = phrase.split()
    for index, word in enumerate(words):
        if word.casefold() in _PREPOSITIONS:
            break
        if word.endswith("s") and not word.endswith("ss") and len(word) > 3 and word[:1].islower():
            singular = [*words[:index], word[:-1], *words[index + 1 :]]
            article = "an" if singular[0][:1].casefold() in "aeiou" else "a"
            return f"{article} {' '.join(singular)}"
    return phrase


@dataclass(frozen=True)
class Side:
    name: str
    text: str
    extra: str  # words the side's query needs beyond its name ("born" for an age comparison)


def _strip_article(text: str) -> str:
    return re.sub(r"^(the|a|an)\s+", "", text.strip(" ,"), flags=re.IGNORECASE)


def pair_sides(question: str) -> list[Side]:
    """ "Are A and B both X?" and "Are both N, A and B, X?" -> "Is A X?", "Is B X?"."""
    match = _PAIR.match(question)
    if not match:
        return []
    aux, both, before, after = match.groups()
    first = before.rsplit(",", 1)[1] if both and "," in before else before
    # "Do both films X and Y ...": the lower-case words before the first name say what the sides are.
    first = re.sub(r"^(?:[a-z][\w'-]*\s+)+(?=[A-Z\d\"])", "", first.strip())
    if both and "," in after:
        second, predicate = after.split(",", 1)
    elif " both " in f" {after} ":
        second, predicate = re.split(r"\bboth\b", after, maxsplit=1)
    else:
        names = name_spans(after)
        if not names or not after.startswith(names[0]):
            return []
        second, predicate = names[0], after[len(names[0]) :]
    first, second, predicate = _strip_article(first), _strip_article(second), predicate.strip(" ,")
    if not (first and second and predicate and _is_capitalised(first) and _is_capitalised(second)):
        return []
    verb = _SINGULAR_AUX[aux.casefold()]
    return [
        Side(name, f"{verb} {name} {_singular_phrase(predicate)}?", predicate) for name in (first, second)
    ]


def _side_text(name: str, stem: str) -> tuple[str, str]:
    """A readable sub-question for one side of "Which ..., A or B?", and its extra query words."""
    if _AGE.search(stem):
        return f"When was {name} born?", "born"
    event = _EVENT.search(stem)
    if _FIRST.search(stem) and event:
        return f"When was {name} {event.group()}?", event.group()
    return f"What is known about {name}?", stem


def choice_sides(question: str) -> list[Side]:
    """ "Which is older, A or B?" and "Between A and B, which ...?" -> one sub-question per side."""
    body = question.strip().rstrip("?").strip()
    between = re.match(r"^Between\s+(.+?)\s+and\s+(.+?),\s*(.+)$", body, flags=re.IGNORECASE)
    if between:
        first, second, stem = between.groups()
    elif re.match(r"^(Which|Who|What|Whose)\b", body, flags=re.IGNORECASE) and " or " in body:
        left, second = body.rsplit(" or ", 1)
        stem, _, first = left.rpartition(",")
        if not stem:  # no comma: "Which band was formed first The Exies or Circus Diablo"
            stem = first
    else:
        return []
    first_names, second_names = name_spans(first), name_spans(second)
    if not first_names or not second_names:
        return []
    # The sides are the names nearest the "or": the last one before it and the first one after it.
    names = [_strip_article(first_names[-1]), _strip_article(second_names[0])]
    stem = stem.replace(first_names[-1], " ")
    return [Side(name, *_side_text(name, stem)) for name in names]


def question_entities(question: str) -> list[str]:
    """Entities to search for, best first: quoted titles and multi-word names, single names, years."""
    text = normalise(question)
    quoted = [title.strip() for title in QUOTED.findall(text)]
    rest = QUOTED.sub(" , ", text)
    names = name_spans(rest, question=True)
    multi = [name for name in names if len(name.split()) > 1]
    single = [name for name in names if len(name.split()) == 1 and not YEAR.fullmatch(name)]
    years = [match.group(1) for match in YEAR.finditer(text)]
    ordered = sorted(quoted + multi, key=text.find) + single + years
    return list(dict.fromkeys(ordered))


@dataclass(frozen=True)
class Phrase:
    words: tuple[str, ...]  # lower-case content words: "quote", "tornado outbreaks"
    shown: str  # as the question put it, with its article: "a quote", "the two tornado outbreaks"
    subject: bool  # the subject of "How does X ...?"


def _is_verb_form(word: str) -> bool:
    """A past form or participle ("translated", "known"), which ends a noun phrase; not "speed"."""
    return word in _PARTICIPLES or (len(word) >= 4 and word.endswith("ed") and not word.endswith("eed"))


def _trim_phrase(run: list[str], opener: str, subject: bool) -> list[str]:
    """The noun phrase within a run of content words: verbs that follow it are cut off.

    "citeflow check" (the subject, then its verb) -> "citeflow"; "a quote appears" (a singular noun,
    then a verb in -s) -> "quote"; "tornado outbreaks killed" -> "tornado outbreaks".
    """
    while run and _is_verb_form(run[-1]):
        run = run[:-1]
    singular_then_verb = opener in _SINGULAR_DETERMINERS and len(run) > 1 and re.search(r"[^su]s$", run[-1])
    if len(run) > 1 and (subject or singular_then_verb):
        run = run[:-1]
    return run


def _is_content(token: str) -> bool:
    return token[:1].isalnum() and token not in STOPWORDS


def key_phrases(question: str) -> list[Phrase]:
    """The question's key terms beyond its names, in order: the noun phrases after an article or a
    preposition, and the subject of "How/Why/What does X ...?". Rule-based, so rough; each phrase
    only has to make a search of its own."""
    text = normalise(question)
    for entity in sorted(question_entities(text), key=len, reverse=True):
        text = text.replace(entity, " , ")  # names are searched for already; a comma ends a phrase
    tokens = _PHRASE_TOKEN.findall(text)
    lowered = [token.casefold() for token in tokens]
    mechanism = len(lowered) > 2 and lowered[0] in _MECHANISM_OPENERS and lowered[1] in _DO_AUXILIARIES
    phrases: list[Phrase] = []
    index = 0
    while index < len(tokens):
        if not _is_content(lowered[index]):
            index += 1
            continue
        start = index
        while index < len(tokens) and _is_content(lowered[index]):
            index += 1
        opener = lowered[start - 1] if start else ""
        subject = mechanism and not phrases and all(word in _DETERMINERS for word in lowered[2:start])
        if opener in _ASKING or not (subject or opener in _PHRASE_OPENERS):
            continue
        if subject and index - start > SUBJECT_MAX_WORDS:
            continue
        run = _trim_phrase(lowered[start:index], opener, subject)
        if not run or len(" ".join(run)) < 3:
            continue
        article = opener if opener in _DETERMINERS else ""
        if article not in ("", "a", "an", "the"):  # "their bands" means nothing out of its question
            article = "the"
        shown = " ".join([*([article] if article else []), *tokens[start : start + len(run)]])
        phrases.append(Phrase(tuple(run), shown, subject))
    return phrases


class Form(StrEnum):
    """How a question wants to be answered."""

    both = "both"  # "Are A and B both P?", "Is A P?": yes when every side shows P
    same = "same"  # "Are A and B in the same X?": yes when the sides name the same X
    choice = "choice"  # "Which is older, A or B?": one of the sides
    open = "open"  # anything else: a name, date, number or phrase the evidence states


class Asks(StrEnum):
    """What kind of answer a question wants, from its question words ("who", "what year", ...)."""

    yes_no = "yes_no"
    person = "person"
    place = "place"
    time = "time"
    number = "number"
    thing = "thing"


class Order(StrEnum):
    earliest = "earliest"  # "older", "first", "earlier"
    latest = "latest"  # "younger", "last", "more recent"
    most = "most"  # "more", "larger", "highest": the greater number
    least = "least"  # "fewer", "smaller", "lowest": the smaller number


_AUXILIARY_OPENERS = frozenset("are is was were do does did has have had can could will would".split())  # noqa: SIM905
_LATEST = re.compile(
    r"\b(younger|youngest|latest|later|last|newer|newest|most recent(?:ly)?|more recent(?:ly)?)\b", re.I
)
_EARLIEST = re.compile(r"\b(older|oldest|first|earlier|earliest)\b", re.I)
_MOST = re.compile(
    r"\b(more|most|larger|largest|bigger|biggest|higher|highest|greater|greatest|longer|longest)\b", re.I
)
_LEAST = re.compile(r"\b(fewer|fewest|less|least|smaller|smallest|lower|lowest|shorter|shortest)\b", re.I)


def _order(text: str) -> Order | None:
    """The direction a choice applies to its sides' values: by dates, then by numbers."""
    if _LATEST.search(text):
        return Order.latest
    if _EARLIEST.search(text):
        return Order.earliest
    if _MOST.search(text):
        return Order.most
    if _LEAST.search(text):
        return Order.least
    return None


_SAME = re.compile(r"\bsame\s+([a-z]+)", re.IGNORECASE)
_TIME_NOUNS = frozenset("year date century decade day month era".split())  # noqa: SIM905
_PLACE_NOUNS = frozenset(
    "city town village state country county province region continent island nation location place "  # noqa: SIM905
    "district capital".split()
)
_NUMBER_WORDS = re.compile(r"\b(population|how many|how much|how long|how old|how tall|how high)\b", re.I)
# The question's own words that say what is asked, not what it is about: never evidence of an answer.
_ASKING_WORDS = frozenset("name named many much kind type sort also one ones common".split())  # noqa: SIM905


@dataclass(frozen=True)
class QuestionShape:
    text: str
    form: Form
    asks: Asks
    sides: tuple[str, ...]  # the compared names, for both, same and choice
    entities: tuple[str, ...]  # names and quoted titles, best first (years are not names)
    relation: frozenset[str]  # stems of what the question says beyond its names: evidence must show them
    predicate: frozenset[str]  # stems a side must show: "film director" for "both film directors?"
    same_noun: str = ""  # "province" for "in the same province?"
    order: Order | None = None  # for a choice decided by dates
    # Stems next to the question word, each with its nearness (1 / words away): "godfather is whom".
    slot: tuple[tuple[str, float], ...] = ()
    predicate_text: str = ""  # the predicate as the question says it: "film directors"
    # What a verbless question asks for: "Place of birth" (no name: a page so titled is no anchor).
    head: str = ""


def _last_sentence(question: str) -> str:
    """ "The director A has an OBE. Does B also have one?" -> the sentence that asks."""
    parts = [part for part in re.split(r"(?<=[.?!])\s+(?=[A-Z])", question.strip()) if part.strip()]
    asking = [part for part in parts if part.rstrip().endswith("?")]
    return (asking or parts or [question])[-1]


_WH = frozenset("what which who whom whose when where how".split())  # noqa: SIM905
# The answer's sentence most likely repeats this many content words on each side of the question word.
SLOT_WORDS = 3
# A question word after one of these asks ("founded by who", "under what name", ", what city").
_LEADS = _PREPOSITIONS | frozenset(
    "under into about during after before among between through within ,".split()  # noqa: SIM905
)


def _asking_word(sentence: list[str]) -> int | None:
    """Where the question word that asks is: the first word, else the last one after a preposition or a
    comma ("founded by who", "in what year", ", what city"), else the last one. A "who" after a noun mostly
    opens a clause ("the actress who played which part") and asks nothing."""
    candidates = [index for index, word in enumerate(sentence) if word in _WH]
    if not candidates:
        return None
    if candidates[0] == 0:
        return 0
    led = [index for index in candidates if sentence[index - 1] in _LEADS]
    return led[-1] if led else candidates[-1]


def verbless_head(question: str) -> str:
    """What a question with no question word and no verb asks for: "Place of birth of the performer of
    song X?" -> "Place of birth"; "Date of death of the director of film Y?" -> "Date of death";
    "Nationality of X?" -> "Nationality". Empty for any other question."""
    sentence = _last_sentence(question).strip()
    found = re.match(r"^([A-Za-z]+(?:\s+of\s+[a-z]+)?)\s+of\s+\S", sentence)
    if not found or found.group(1).split()[0].casefold() in _WH | _AUXILIARY_OPENERS:
        return ""
    return found.group(1)


def _kind_stems(head: str) -> set[str]:
    """The stems of the head's kind noun ("place", "date"): they say what is asked, no claim repeats them."""
    first = head.split()[0].casefold() if head else ""
    return _stems(first) if first in _TIME_NOUNS | _PLACE_NOUNS else set()


def _head_kind(head: str) -> Asks:
    """The kind a verbless head asks for, from its first noun: a place, a time, else a thing."""
    first = head.split()[0].casefold() if head else ""
    if first in _TIME_NOUNS:
        return Asks.time
    if first in _PLACE_NOUNS or first == "birthplace":
        return Asks.place
    return Asks.thing


def _asks(question: str) -> Asks:
    """The kind of answer, from the question word that asks; "thing" when nothing says more."""
    sentence = [word.casefold() for word in re.findall(r"[\w'-]+|,", _last_sentence(question))]
    where = _asking_word(sentence)
    if where is None:
        if sentence and sentence[0] in _AUXILIARY_OPENERS:
            return Asks.yes_no
        return _head_kind(verbless_head(question))
    if _NUMBER_WORDS.search(question):
        return Asks.number
    word = sentence[where]
    if word == "when":
        return Asks.time
    if word == "where":
        return Asks.place
    if word in ("who", "whom"):
        return Asks.person
    # "what year", "in which Australian city": a noun soon after the question word names the kind.
    for following in sentence[where + 1 : where + 4]:
        if following in _TIME_NOUNS:
            return Asks.time
        if following in _PLACE_NOUNS:
            return Asks.place
    return Asks.thing


def _stems(text: str) -> set[str]:
    return set(relation_stems(text))


def _slot(question: str, named: set[str]) -> tuple[tuple[str, float], ...]:
    """The content stems within SLOT_WORDS words of the question word that asks, in its clause, with
    their nearness (1 / (words away) squared: the next word says most): what the answer's own sentence
    most likely repeats ("sold more than how many records", "godfather is whom", "which Danish heavy
    metal band"). The stems of the question's names (`named`) are left out: every sentence of their own
    pages repeats them."""
    raw = re.findall(r"[\w'-]+|[,;:]", _last_sentence(question))
    sentence = [word.casefold() for word in raw]
    where = _asking_word(sentence)
    if where is None:
        head = verbless_head(question)  # "Place of birth": what the answer's sentence says ("born in")
        return tuple(sorted({stem: 1.0 for stem in _stems(head) - named - _kind_stems(head)}.items()))
    near: dict[str, float] = {}

    def take(word: str, nearness: float) -> bool:
        stems = [canonical(stem) for stem in content_stems(word) if canonical(stem) not in named]
        for stem in stems:
            near[stem] = max(near.get(stem, 0.0), nearness)
        return bool(stems)

    for step in (-1, 1):
        index, taken = where + step, 0
        while 0 <= index < len(sentence) and taken < SLOT_WORDS and sentence[index] not in ",;:":
            word = sentence[index]
            if word not in _WH and word not in _ASKING_WORDS and take(word, 1 / (taken + 1) ** 2):
                taken += 1
            index += step
    # "In what year was the man ... born?", "Who did X have a child with?": after an inverted auxiliary
    # the verb or noun that asks ends the question (in lower case: "... Counting Crows?" ends on a name).
    if where <= 1 and set(sentence[where + 1 : where + 3]) & _AUXILIARY_OPENERS:
        last = [word for word in raw if word.isalpha() and word.casefold() not in STOPWORDS]
        if last and last[-1].islower():
            take(last[-1], 1.0)
    return tuple(sorted(near.items()))


def question_sides(question: str) -> list[Side]:
    """The two sides a question compares: "Are A and B both P?" (a yes-or-no question only: "Do Lafzon
    Ki Kahani, ..." names a film) or "Which is older, A or B?"."""
    text = normalise(question)
    if _asks(text) is Asks.yes_no:
        return pair_sides(_last_sentence(text))
    return choice_sides(text)


def read_question(question: str) -> QuestionShape:
    """The question's form, what it asks for, its names, and the stems the evidence must show."""
    text = normalise(question)
    entities = tuple(name for name in question_entities(text) if not YEAR.fullmatch(name))
    named = set().union(*(_stems(name) for name in entities)) if entities else set()
    asking = _stems(" ".join(_ASKING_WORDS))
    yes_no = _asks(text) is Asks.yes_no
    pair = question_sides(text) if yes_no else []
    choice = [] if yes_no else question_sides(text)
    sides = tuple(side.name for side in pair or choice)
    side_stems = set().union(*(_stems(side) for side in sides)) if sides else set()
    relation = frozenset(_stems(text) - named - side_stems - asking)
    same = _SAME.search(text)
    if pair and same:
        noun = same.group(1).casefold()
        role = frozenset(_stems(pair[0].extra) - side_stems - asking)
        return QuestionShape(text, Form.same, Asks.yes_no, sides, entities, relation, role, noun)
    if pair:
        predicate = frozenset(_stems(pair[0].extra) - side_stems - asking - {"both"})
        shown = pair[0].extra.strip(" ?")
        return QuestionShape(
            text, Form.both, Asks.yes_no, sides, entities, relation, predicate, predicate_text=shown
        )
    if choice:
        stem_words = re.split(r",|\bor\b", text)[0]
        predicate = frozenset(_stems(stem_words) - side_stems - asking)
        order = _order(text)
        return QuestionShape(text, Form.choice, Asks.thing, sides, entities, relation, predicate, order=order)
    if yes_no:
        # "A has an OBE. Does B also have one?": one side, the names of the asking sentence; it must show
        # everything else the question says, the other names included ("one" is the OBE).
        own = tuple(question_entities(_last_sentence(text))) or entities[:1]
        own_stems = set().union(*(_stems(name) for name in own)) if own else set()
        predicate = frozenset(_stems(text) - own_stems - asking)
        return QuestionShape(text, Form.both, Asks.yes_no, own, entities, relation, predicate)
    slot = _slot(text, named)
    head = verbless_head(text)
    relation = relation - _kind_stems(head)
    return QuestionShape(
        text, Form.open, _asks(text), (), entities, relation, frozenset(), slot=slot, head=head
    )
