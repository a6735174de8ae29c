"""Which kind of report a question wants: one answer first, or a digest of every distinct finding.

A question with one answer (a name, a date, a number, yes or no, a choice between two) gets the
answer-first report. Any other question (how, why, what the sources report about a topic, the effects or
causes of something, a topic with no question at all) gets a digest. The choice reads only the grammar of
the asking sentence: its question word, the auxiliary verb that opens it, whether the thing asked for is
plural, and whether it asks about a topic ("about", "regarding"). No word of any dataset's topics is read.
"""

from __future__ import annotations

import re
from enum import StrEnum

from citeflow.config import Caps


class ReportKind(StrEnum):
    answer = "answer"  # one fact: the answer first, then what supports it
    digest = "digest"  # an open question: an opening, then every distinct finding grouped under headings


_WH = frozenset("what which who whom whose when where how why".split())  # noqa: SIM905
# A question that opens with one of these asks yes or no ("Is X a Y?", "Did X win?").
_AUXILIARIES = frozenset(
    "is are was were am do does did has have had can could will would shall should may might must".split()  # noqa: SIM905
)
# "how" followed by one of these asks for a quantity ("how many", "how old"), a single value.
_QUANTITY = frozenset("many much old long far tall high big large often fast deep wide heavy".split())  # noqa: SIM905
# A verb of reporting followed by a topic marker asks what is said about a topic, not for one fact.
_TOPIC_MARKERS = frozenset("about regarding concerning surrounding".split())  # noqa: SIM905
_PLURAL_COPULAS = frozenset(["are", "were"])
# Words ending in -s that are not plural nouns.
_NOT_PLURAL = re.compile(r"(?:ss|us|is|ous|ics|news|series|species|was|has|does|is)$")
# "How is X related to Y?" asks for one relation, not a process.
_RELATIONS = frozenset("related connected linked associated".split())  # noqa: SIM905
# A question word after one of these fills one slot of a statement: "released in which year", ", what city".
_SLOT_LEADS = frozenset("in of from at on with for by to as after under into during , ".split())  # noqa: SIM905
# "this 4-letter name", "these two bands": a clue that points at one thing to be named.
_POINTERS = frozenset(["this", "these"])
_DETERMINERS = frozenset("the a an this that these those its their his her some any main key major".split())  # noqa: SIM905


def _asking_sentence(question: str) -> list[str]:
    """The lower-case words of the sentence that asks (the last one ending in '?', else the last one)."""
    # A sentence ends after a word of three letters or more ("E. B. White" and "D.P. Varma" go on).
    parts = [part for part in re.split(r"(?<=[?!])\s+|(?<=\w{3}\.)\s+", question.strip()) if part.strip()]
    asking = [part for part in parts if part.rstrip().endswith("?")]
    sentence = (asking or parts or [question])[-1]
    return [word.casefold() for word in re.findall(r"[\w'-]+|,", sentence)]


def _is_plural(word: str) -> bool:
    return len(word) > 3 and word.endswith("s") and not _NOT_PLURAL.search(word)


def _head_noun_plural(words: list[str]) -> bool:
    """Whether the noun phrase that starts `words` ends in a plural noun: "the main causes of" -> yes."""
    phrase = []
    for word in words:
        if word in _DETERMINERS and not phrase:
            continue
        if word in _AUXILIARIES or word in _WH or word in ("of", "in", "for", "on", "to", "and", "that"):
            break
        phrase.append(word)
        if len(phrase) == 3:
            break
    return bool(phrase) and _is_plural(phrase[-1])


def report_kind(question: str) -> ReportKind:
    """The kind of report `question` wants, from the grammar of the sentence that asks."""
    words = _asking_sentence(question)
    if not words:
        return ReportKind.digest
    if any(word in _TOPIC_MARKERS for word in words):
        return ReportKind.digest  # "what do the sources report about X", "latest regarding Y"
    if words[0] in _AUXILIARIES:
        return ReportKind.answer  # yes or no, or a choice between the sides it names
    asking = [index for index, word in enumerate(words) if word in _WH]
    if not asking:
        # A topic or an instruction ("Latest on X", "Describe X"), unless it is a clue ("... a group known
        # by this acronym.", that asks for the one thing it points at) or a verbless question about one
        # thing ("Place of birth of X?"; "Effects of X?" asks for many).
        one_thing = question.rstrip().endswith("?") and not _head_noun_plural(words)
        return ReportKind.answer if one_thing or _POINTERS & set(words) else ReportKind.digest
    if any(index and words[index - 1] in _SLOT_LEADS for index in asking):
        return ReportKind.answer  # one slot of a statement: "How to Eat, released in which year, ..."
    word, rest = words[asking[0]], words[asking[0] + 1 :]
    if word == "why":
        return ReportKind.digest
    if word == "how":
        if rest and rest[0] in _QUANTITY or _RELATIONS & set(rest):
            return ReportKind.answer
        return ReportKind.digest
    if word in ("what", "which") and rest and rest[0] in _PLURAL_COPULAS and _head_noun_plural(rest[1:]):
        return ReportKind.digest  # "What are the effects of X?": many things asked for
    return ReportKind.answer


# An open question's findings are each stated on several pages, and a finding cites every page that
# states it: the digest reads more pages a search, verifies more a round, and quotes more of each page.
# Measured on summhay-dev's Dodge topic (10/40/5 -> 20/60/12): the verified claims fully state 14% -> 58%
# of the key facts, the pages read hold 40% -> 63% of the pages stating them; joint 0.02 -> 0.084, and on
# the other topic (SVB, held out) 0.069 -> 0.147. A digest run takes about 15 s instead of 7.
# Claims a page 12 -> 20 (the cap's maximum), so that the sentence of a page stating a finding is among its
# claims and the page is cited for it: of the pages stating a covered key fact, the report cites 59% -> 61%
# on Dodge and 51% -> 61% on SVB; joint 0.310 -> 0.384 on Dodge but 0.310 -> 0.312 on SVB, whose coverage
# fell 0.48 -> 0.44 (more claims to choose among). About 45 s a question instead of 40.
DIGEST_CAPS = {"pages_per_search": 20, "pages_verified_max": 60, "claims_per_page": 20}


def caps_for(kind: ReportKind, caps: Caps) -> Caps:
    """The caps a run of this kind works within: a digest raises the breadth caps the settings leave at
    their defaults (a cap the user set is kept, whatever it is)."""
    if kind is ReportKind.answer:
        return caps
    raised = {
        name: max(value, getattr(caps, name))
        for name, value in DIGEST_CAPS.items()
        if name not in caps.model_fields_set
    }
    return caps.model_copy(update=raised)
