"""Answers from verified claims, by rules: which claims answer the question, which support the answer,
and which entities a second research round should look up.

The extractive synthesiser writes its report from `answer`, and the extractive planner asks follow-up
questions about what `bridges` finds. Only verified claims and the titles of their pages are read. Every
sentence proposed is a verified claim, or a short verdict ("No: French for A, American for B.") that
cites the claims deciding it; when the claims do not answer the question, no answer is proposed at all.

A multi-hop question reaches its answer through a chain: a claim on a page the question is about (the
anchor) names another entity (the bridge), or a claim on the bridge's page names the anchor, and a claim
on the bridge's page states what the question asks. A page is an anchor when the question names its title
outright, less surely when its title contains one of the question's names, least when a claim on it
matches what the question describes ("the runner-up in the 1999 World Drivers' Championship"); once a page
about one of the question's names is read, only such pages anchor an answer (entity linking: a claim is
about what its page is about). The chain's score is rank.py's. Comparisons read each side's value (a date,
a name next to the compared noun, a nationality) from its own page or from the page its role word names
("directed by Z"), and apply the question's direction. The best
chain shows most of the question's relation words (each weighted by how rare it is among the claims) and
of the words next to its question word, discounted by how sure its anchor is; below a threshold, nothing
answers. The constants were set on hotpotqa-100 with and without each question's gold pages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from citeflow.checks import claims_by_source, classify
from citeflow.contracts import Claim, ClaimStatus, DraftSentence, SentenceCheck, SynthesisInput
from citeflow.extractive import rank
from citeflow.extractive.question import (
    DEMONYM,
    INITIALS,
    QUOTED,
    YEAR,
    Asks,
    Form,
    Order,
    QuestionShape,
    name_spans,
)
from citeflow.extractive.rank import SLOT_WEIGHT, Anchor, Weights, canonical, chain_stems, relation_stems
from citeflow.text import STOPWORDS, content_stems, content_words, numbers, words

# At most this many sentences support an answer, after the sentences that give it.
SUPPORT_MAX = 3
# A report that cannot answer lists at most this many related claims.
RELATED_MAX = 3
# A chain answers only when its score (after ANCHOR_TRUST) is at least this share of what the question
# says (its relation and the words next to its question word, by weight): less is a chain of pages that
# merely share the question's names.
ANSWER_MIN_SCORE = 0.25
# A chain through pages the question names every one of ("Amy Johnson", "They Flew Alone") needs only this
# share of ANSWER_MIN_SCORE: the question itself vouches for its pages.
NAMED_CHAIN_SHARE = 0.5
# A page is one the question describes when a claim on it shows this share of the relation (by weight).
DESCRIBED_SHARE = 0.5
# For a follow-up (only a search), a page is described by a claim showing this share of the relation:
# "the runner-up in the 1999 World Drivers' Championship" is a small part of a question about a game.
FOLLOW_DESCRIBED_SHARE = 0.25
# Nouns whose value is a nationality adjective ("American") as often as a name.
_NATIONALITY = frozenset(relation_stems("country nationality"))
[_NATIONAL] = relation_stems("nationality")
# In "the same X?", a side's value is a name at most this many words from its claim's "X".
SAME_NEAR_WORDS = 3
# A bridge named further than this many words from the relation words its claim shares with the
# question is less likely the one the question means.
BRIDGE_NEAR_WORDS = 8

_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_DAY_MONTH_YEAR = re.compile(r"\b(\d{1,2})\s+([A-Z][a-z]+)\.?\s+(\d{4})\b")
_MONTH_DAY_YEAR = re.compile(r"\b([A-Z][a-z]+)\.?\s+(\d{1,2}),?\s+(\d{4})\b")
_NUMBER_WORDS = frozenset(
    "once twice thrice two three four five six seven eight nine ten eleven twelve dozen hundred thousand "  # noqa: SIM905
    "million billion".split()
)
_TIME_WORDS = frozenset(["century", "centuries", "decade", "decades", *_MONTHS])


def title_subjects(title: str) -> list[str]:
    """What a page title names: "Charmed (TV series)" -> "Charmed"; "Young, New South Wales" -> that and
    "Young"; "X - Wikipedia" -> "X"."""
    base = re.split(r"\s+[-|–—]\s+", title)[0]
    base = re.sub(r"\s*\([^)]*\)\s*$", "", base).strip() or title
    return list(dict.fromkeys([base, base.split(",")[0].strip()]))


def _name_words(text: str) -> set[str]:
    return {word for word in words(text) if word not in STOPWORDS}


def is_named(title: str, name: str) -> bool:
    """Whether the page's title names exactly `name` (up to case, articles and a qualifier)."""
    named = _name_words(name)
    return bool(named) and any(_name_words(subject) == named for subject in title_subjects(title))


def says(text: str, phrase: str) -> bool:
    """Whether `text` has the words of `phrase`, in order and next to each other."""
    said, wanted = words(text), words(phrase)
    return bool(wanted) and any(
        said[start : start + len(wanted)] == wanted for start in range(len(said) - len(wanted) + 1)
    )


def names_title(text: str, title: str) -> bool:
    """Whether `text` (a question, a claim) says what the page's title names, word for word and in order:
    a question that says "Flute Sonata in C major, BWV 1033" names that page, whatever its names parse,
    while "a residential hall in a university" does not name "University Hall"."""
    return any(_name_words(subject) and says(text, subject) for subject in title_subjects(title))


def is_about(title: str, name: str) -> bool:
    """Whether the page's title names `name` or a name that contains it or is contained in it ("Cotula
    mexicana" for "Cotula"): looser than `is_named`."""
    named = _name_words(name)
    for subject in title_subjects(title):
        words_of = _name_words(subject)
        if named and words_of and (named <= words_of or words_of <= named):
            return True
    return False


def mentions(text: str, name: str) -> bool:
    named = _name_words(name)
    return bool(named) and named <= set(words(text))


def claim_names(text: str) -> list[str]:
    """Names a claim mentions: quoted titles, capitalised spans, and "Place, Region" pairs joined."""
    spans = name_spans(text)
    joined = [
        f"{first}, {second}"
        for first, second in zip(spans, spans[1:], strict=False)
        if f"{first}, {second}" in text
    ]
    return list(dict.fromkeys([*QUOTED.findall(text), *joined, *spans]))


@dataclass(frozen=True)
class Evidence:
    """A verified claim with what the rules read from it."""

    claim: Claim
    source_id: str
    title: str
    stems: frozenset[str]
    names: tuple[str, ...]
    first: bool  # the earliest claim on its page: usually the sentence that defines the page's subject

    @property
    def page(self) -> str:
        return self.claim.page_id


def gather(request: SynthesisInput) -> list[Evidence]:
    """The request's verified, numbered claims, in claim order, each quote of a page once (a page read
    for several sub-questions gives the same sentence again)."""
    titles = {source.id: source.title for source in request.sources}
    seen: set[tuple[str, str]] = set()
    claims = []
    for claim in request.claims:
        key = (claim.page_id, claim.quote)
        if claim.status is ClaimStatus.verified and claim.source_id in titles and key not in seen:
            seen.add(key)
            claims.append(claim)
    earliest: dict[str, int] = {}
    for claim in claims:
        if claim.quote_start is not None:
            earliest[claim.page_id] = min(earliest.get(claim.page_id, claim.quote_start), claim.quote_start)
    return [
        Evidence(
            claim=claim,
            source_id=claim.source_id or "",
            title=titles[claim.source_id or ""],
            stems=relation_stems(claim.text) | _value_stems(claim.text),
            names=tuple(claim_names(claim.text)),
            first=claim.quote_start is not None and claim.quote_start == earliest.get(claim.page_id),
        )
        for claim in claims
    ]


def _question_words(shape: QuestionShape) -> set[str]:
    return set(words(shape.text))


def offers_answer(item: Evidence, shape: QuestionShape) -> bool:
    """Whether the claim states something of the kind asked that the question does not already say."""
    asked = _question_words(shape)
    text = item.claim.text
    if shape.asks is Asks.time:
        new_year = any(year not in asked for year in YEAR.findall(text))
        # "In what year ...?" wants a year; "when", "which date" are answered by a month or a century too.
        return new_year or ("year" not in asked and bool(set(words(text)) & _TIME_WORDS - asked))
    if shape.asks is Asks.number:
        return any(number not in asked for number in numbers(text)) or bool(
            set(words(text)) & _NUMBER_WORDS - asked
        )
    if shape.asks in (Asks.person, Asks.place):
        return any(not _name_words(name) <= asked for name in item.names)
    if dict(shape.slot).get(_NATIONAL, 0.0) >= 1.0:  # "what nationality": one must be stated
        return bool(_value_stems(text))
    return bool(set(content_words(text)) - asked)


@dataclass(frozen=True)
class Chain:
    links: tuple[Evidence, ...]  # anchor claim first, the claim that answers last
    cover: float
    anchor: Anchor
    backward: bool = False  # reached through a claim on the answer's page that names the anchor

    @property
    def answer(self) -> Evidence:
        return self.links[-1]


def pages_of(evidence: list[Evidence]) -> dict[str, list[Evidence]]:
    pages: dict[str, list[Evidence]] = {}
    for item in evidence:
        pages.setdefault(item.page, []).append(item)
    return pages


def anchors(
    shape: QuestionShape, evidence: list[Evidence], weights: Weights, following: bool = False
) -> dict[str, Anchor]:
    """Each page's anchor kind. With no names in the question, every page is one it may be about. A page
    is described when a claim on it shows DESCRIBED_SHARE of the relation (by weight); when `following`
    (choosing follow-ups, which are only searches), FOLLOW_DESCRIBED_SHARE is enough, and so is a claim
    that mentions one of the question's names."""
    share = FOLLOW_DESCRIBED_SHARE if following else DESCRIBED_SHARE
    named_text = shape.text.replace(shape.head, " ", 1) if shape.head else shape.text
    kinds = {}
    for page, items in pages_of(evidence).items():
        title = items[0].title
        if names_title(named_text, title):
            kinds[page] = Anchor.named
        elif any(is_about(title, name) for name in shape.entities):
            kinds[page] = Anchor.titled
        elif (
            not shape.entities
            or (
                weights.whole > 0
                and max(weights.cover(item.stems) for item in items) >= share * weights.whole
            )
            or (
                following
                and any(mentions(item.claim.text, name) for item in items for name in shape.entities)
            )
        ):
            kinds[page] = Anchor.described
        else:
            kinds[page] = Anchor.none
    # Entity linking: a claim is about the entity its page is about. Once a page about one of the
    # question's names is read, an answer starts there (or reaches another page through a claim that
    # names it), never on a page about someone else that merely matches the description ("her husband"
    # on another woman's page). A follow-up search may still start from such a page.
    if not following and any(kind >= Anchor.titled for kind in kinds.values()):
        kinds = {page: Anchor.none if kind is Anchor.described else kind for page, kind in kinds.items()}
    return kinds


def names_page(item: Evidence, title: str) -> bool:
    """Whether the claim names the page titled `title`: among its names ("born in Young, New South
    Wales" names "Young, New South Wales"), or word for word when the title has several words."""
    if any(is_named(title, name) for name in item.names if _name_words(name)):
        return True
    # Word for word only for a subject of several words: "David Leland" does not name "Leland, North
    # Carolina" by its one-word subject "Leland".
    return any(
        len(_name_words(subject)) > 1 and says(item.claim.text, subject) for subject in title_subjects(title)
    )


def links(evidence: list[Evidence]) -> dict[str, dict[str, list[Evidence]]]:
    """page -> linked page -> the claims that link them: a claim on either that names the other."""
    pages = pages_of(evidence)
    linked: dict[str, dict[str, list[Evidence]]] = {page: {} for page in pages}
    for page, items in pages.items():
        for other, others in pages.items():
            if other == page:
                continue
            naming = [item for item in items if names_page(item, others[0].title)]
            if naming:
                linked[page].setdefault(other, []).extend(naming)
                linked[other].setdefault(page, []).extend(naming)
    return linked


def _is_bridge(name: str, shape: QuestionShape, item: Evidence) -> bool:
    """A name in an anchor claim that the question does not mention, that is not the page's subject, and
    that could have a page of its own: not a date ("July 2007"), a nationality ("South Korean") or
    initials ("O.F.M.")."""
    named = _name_words(name)
    tokens = words(name)
    return (
        bool(named)
        and not named <= _question_words(shape)
        and not is_about(item.title, name)
        and tokens[0] not in _MONTHS
        and not any(token.isdigit() for token in tokens[:1])
        and not DEMONYM.search(tokens[-1])
        and not INITIALS.fullmatch(name.replace(" ", ""))
    )


def chains(shape: QuestionShape, evidence: list[Evidence], weights: Weights) -> list[Chain]:
    """Every chain that ends on a claim offering an answer, best first: one claim on an anchor page, or
    a claim on an anchor page, the claim that links it to another page, and a claim on that page.

    The surer anchor wins, then the chain showing most of the relation, its answering claim's words next
    to the question word counting SLOT_WEIGHT times again ("godfather is whom" is answered by the
    sentence about the godfather); ties go to the chain read first (claim order is search rank).
    """
    kinds = anchors(shape, evidence, weights)
    pages = pages_of(evidence)
    linked = links(evidence)
    found: list[Chain] = []
    for page, kind in kinds.items():
        if kind is Anchor.none:
            continue
        others = [name for name in shape.entities if not is_about(pages[page][0].title, name)]
        for first in pages[page]:
            if offers_answer(first, shape):
                found.append(Chain((first,), _chain_cover((first,), others, weights), kind))
        for other, linking in linked[page].items():
            link = max(linking, key=lambda item: weights.cover(item.stems))
            answers = [item for item in pages[other] if offers_answer(item, shape)]
            for first in pages[page]:
                for last in answers:
                    chain = tuple({item.claim.id: item for item in (first, link, last)}.values())
                    cover = _chain_cover(chain, others, weights)
                    found.append(Chain(chain, cover, kind, backward=link.page == other))
    # Ties go to the chain that follows what the anchor names ("from the soap opera Neighbours") over one
    # from a page that names the anchor, then to the shorter: a claim that adds nothing adds nothing.
    return sorted(found, key=lambda chain: (-chain_score(chain, weights), chain.backward, len(chain.links)))


def _chain_cover(items: tuple[Evidence, ...], others: list[str], weights: Weights) -> float:
    """The relation the claims show, and the question's names other than the anchor's that they mention:
    a chain that reaches "the Mississippi Education Reform Act" from the institute's page says more."""
    stems = chain_stems([item.stems for item in items])
    mentioned = sum(any(mentions(item.claim.text, name) for item in items) for name in others)
    return weights.cover(stems) + mentioned * weights.mean


def chain_score(chain: Chain, weights: Weights) -> float:
    """rank.chain_score; a relation the chain composes (a grandparent from two parent links) is stated
    by the claim that completes it, the answer."""
    stems = [link.stems for link in chain.links]
    composed = chain_stems(stems) - frozenset().union(*stems)
    return rank.chain_score(chain.cover, chain.answer.stems | composed, chain.anchor, weights)


@dataclass(frozen=True)
class Bridge:
    name: str
    query: str


def bridges(shape: QuestionShape, evidence: list[Evidence], limit: int) -> list[Bridge]:
    """Entities the verified claims lead to that a second round should look up, with the relation words
    their claims still lack (what the other page must say): names in the claims of anchor pages, best
    claims first, and the subjects of pages found by description (whose own page is read already, so
    the search is for pages that name them: "the runner-up in the 1999 ... appears on the cover of ...").
    A comparison or verdict gets each side's own: see `side_bridges`."""
    if limit < 1:
        return []
    if shape.form is not Form.open:
        return side_bridges(shape, evidence, limit)
    weights = Weights.of(shape.relation, [item.stems for item in evidence], shape.slot)
    kinds = anchors(shape, evidence, weights, following=True)
    ranked = sorted(
        (item for item in evidence if kinds[item.page] is not Anchor.none),
        key=lambda item: (-kinds[item.page], -(weights.cover(item.stems) + weights.slot_cover(item.stems))),
    )
    chosen: list[Bridge] = []
    seen: set[str] = set()

    def add(name: str, item: Evidence) -> bool:
        key = " ".join(sorted(_name_words(name)))
        if key in seen:
            return False
        seen.add(key)
        missing = [
            word
            for word in dict.fromkeys(content_words(shape.text))
            if content_stems(word) and canonical(content_stems(word)[0]) in shape.relation - item.stems
        ]
        chosen.append(Bridge(name, " ".join([name, *missing])))
        return len(chosen) == limit

    # Round by round, one name from each claim, best claims first: the names of one claim are often
    # alternatives of each other ("Dobby Dobson", "Dobson OD"), while the next claim may name the bridge.
    candidates = []
    for item in ranked:
        names = [name for name in item.names if _is_bridge(name, shape, item)]
        names.sort(key=lambda name: _distance(item, name, weights))
        if kinds[item.page] is Anchor.described:
            names.insert(0, title_subjects(item.title)[-1])
        candidates.append((item, names))
    for round_ in range(max((len(names) for _, names in candidates), default=0)):
        for item, names in candidates:
            if round_ < len(names) and add(names[round_], item):
                return chosen
    return chosen


def side_bridges(shape: QuestionShape, evidence: list[Evidence], limit: int) -> list[Bridge]:
    """Each side's second hop, taking turns between the sides: a side whose own page was not read is
    looked up itself; otherwise the names its page's claims give next to the question's relation words
    ("directed by Z" for "directors from the same country"), nearest first, with the words the other page
    must say ("Z country")."""
    weights = Weights.of(shape.relation | shape.predicate, [item.stems for item in evidence], shape.slot)
    wanted = [
        word
        for word in dict.fromkeys(content_words(shape.text))
        if not _name_words(word) <= _side_words(shape)
    ]
    per_side: list[list[Bridge]] = []
    for side in shape.sides:
        own = _side_evidence(side, evidence)
        if not own:
            per_side.append([Bridge(side, " ".join([side, *wanted]))])
            continue
        if _settled(shape, own):
            continue
        names: list[tuple[int, str]] = []
        for item in own:
            if weights.cover(item.stems) <= 0:
                continue
            names += [
                (_distance(item, name, weights), name) for name in item.names if _is_bridge(name, shape, item)
            ]
        value_words = [
            word for word in wanted if canonical((content_stems(word) or [""])[0]) not in _role_stems(own)
        ]
        per_side.append([Bridge(name, " ".join([name, *value_words])) for _, name in sorted(names)])
    chosen: list[Bridge] = []
    seen: set[str] = set()
    for round_ in range(max((len(found) for found in per_side), default=0)):
        for found in per_side:
            if round_ < len(found) and (key := " ".join(sorted(_name_words(found[round_].name)))) not in seen:
                seen.add(key)
                chosen.append(found[round_])
                if len(chosen) == limit:
                    return chosen
    return chosen


def _settled(shape: QuestionShape, own: list[Evidence]) -> bool:
    """Whether a side's own page already gives what the comparison reads from it: the predicate of
    "both", the value of "the same X" (when no role such as "directors" sends it to another page), the
    date of a choice by dates."""
    shown = _role_stems(own)
    if shape.form is Form.same:
        noun = set(content_stems(shape.same_noun))
        role = shape.predicate - {canonical(stem) for stem in noun}
        return not role and any(_value_near(item, noun) for item in own)
    if shape.form is Form.choice and shape.order is not None:
        return any((found := _event_date(item.claim.text, shape.predicate)) and found[0] > 0 for item in own)
    return shape.predicate <= shown


def _side_words(shape: QuestionShape) -> set[str]:
    return set().union(*(_name_words(side) for side in shape.sides)) if shape.sides else set()


def _role_stems(items: list[Evidence]) -> set[str]:
    """Stems the side's own claims show already: the other page need not repeat them."""
    return set().union(*(item.stems for item in items)) if items else set()


def _distance(item: Evidence, name: str, weights: Weights) -> int:
    """Words between the name and the nearest relation word the claim shares with the question."""
    tokens = words(item.claim.text)
    first = words(name)[:1]
    if not first or first[0] not in tokens:
        return BRIDGE_NEAR_WORDS
    at = tokens.index(first[0])
    near = [
        abs(index - at)
        for index, token in enumerate(tokens)
        if token not in STOPWORDS
        and content_stems(token)[:1]
        and canonical(content_stems(token)[0]) in weights.relation
    ]
    return min(near, default=BRIDGE_NEAR_WORDS)


def _value_stems(text: str) -> frozenset[str]:
    """Relations a claim shows by the kind of value it states: a nationality adjective ("a Danish
    sculptor") states a nationality without the word."""
    adjectives = [word for word in _ADJECTIVE_BEFORE_NOUN.findall(text) if DEMONYM.search(word.casefold())]
    return frozenset([_NATIONAL]) if adjectives else frozenset()


# A capitalised word before a lower-case one, where an adjective stands: "a Danish sculptor", not
# "Christian Bale" or "Northern Vestmark".
_ADJECTIVE_BEFORE_NOUN = re.compile(r"\b([A-Z][a-z]+)(?=(?:-[A-Z][a-z]+)?\s+[a-z])")


@dataclass
class Answer:
    """What the report says: `lead` answers (section ""), `support` backs or qualifies it; when nothing
    answers, `lead` is empty and `support` holds the related claims."""

    lead: list[DraftSentence]
    support: list[DraftSentence]


def _sentence(item: Evidence, section: str) -> DraftSentence:
    return DraftSentence(text=item.claim.text, cites=[item.source_id], section=section)


def _best(items: list[Evidence], weights: Weights) -> Evidence | None:
    """The claim showing most of the relation; the page's defining claim on a tie."""
    if not items:
        return None
    return max(
        items, key=lambda item: (weights.cover(item.stems) + weights.slot_cover(item.stems), item.first)
    )


def _side_evidence(side: str, evidence: list[Evidence]) -> list[Evidence]:
    """Claims from the side's own page: one titled with its name. (A page that merely mentions it, or
    whose title only contains it, "Cotula mexicana" for "Cotula", does not say what the side is.)"""
    return [item for item in evidence if is_named(item.title, side)]


Date = tuple[int, int, int]


def _dates(text: str) -> list[tuple[int, Date]]:
    """Every date a claim states with its position, as (year, month, day); month and day 0 for a year."""
    found: list[tuple[int, Date]] = []
    for match in _DAY_MONTH_YEAR.finditer(text):
        month = _MONTHS.get(match.group(2).casefold())
        if month:
            found.append((match.start(), (int(match.group(3)), month, int(match.group(1)))))
    for match in _MONTH_DAY_YEAR.finditer(text):
        month = _MONTHS.get(match.group(1).casefold())
        if month:
            found.append((match.start(), (int(match.group(3)), month, int(match.group(2)))))
    spans = [(start, start + 12) for start, _ in found]
    for match in YEAR.finditer(text):
        if not any(start <= match.start() < end for start, end in spans):
            found.append((match.start(), (int(match.group(1)), 0, 0)))
    return sorted(found)


[_BORN], [_DIED] = relation_stems("born"), relation_stems("died")


def _event_date(text: str, predicate: frozenset[str]) -> tuple[int, Date] | None:
    """The date of the event the question compares, with how surely it is that date (2: next to the
    event's word, "born on 3 May 1950"; 1: a life's dates in brackets, "(3 May 1950 - 1 June 2001)", the
    first for a birth, the last for a death; 0: the claim's first date)."""
    found = _dates(text)
    if not found:
        return None
    said = [
        match.end()
        for match in re.finditer(r"[\w'-]+", text)
        if canonical((content_stems(match.group().casefold()) or [""])[0]) in predicate
    ]
    after = [(position - end, date) for position, date in found for end in said if 0 <= position - end <= 40]
    if after:
        return 2, min(after)[1]
    bracket = re.search(r"\(([^()]*)\)", text)
    inside = [date for position, date in found if bracket and bracket.start() < position < bracket.end()]
    if inside and _BORN in predicate:
        return 1, inside[0]
    if inside and _DIED in predicate and len(inside) > 1:
        return 1, inside[-1]
    return 0, found[0][1]


def _name_near(item: Evidence, noun: set[str]) -> str | None:
    """The claim's name nearest its noun, at most SAME_NEAR_WORDS words away, the one before it on a tie
    ("in Jiangsu province, China" -> "Jiangsu"), without the noun itself ("the State of Louisiana" ->
    "Louisiana"); None when the claim never says the noun."""
    raw = re.findall(r"\w+", item.claim.text)
    tokens = [token.casefold() for token in raw]
    # The noun as a noun: "Jiangsu province", "the State of Louisiana"; not inside "the United States".
    at = [
        index
        for index, token in enumerate(raw)
        if set(content_stems(token.casefold())) & noun
        and (token.islower() or tokens[index + 1 : index + 2] == ["of"])
    ]
    ranked = []
    for name in item.names:
        own = [word for word in words(name) if not set(content_stems(word)) & noun]
        if own and own[0] in tokens:
            where = tokens.index(own[0])
            distance = min(
                (abs(where - index) for index in at if where != index), default=SAME_NEAR_WORDS + 1
            )
            if distance <= SAME_NEAR_WORDS:
                ranked.append((distance, not any(where < index for index in at), " ".join(own)))
    return min(ranked)[2] if ranked else None


_SCALE = {"thousand": 1e3, "million": 1e6, "billion": 1e9}


def _quantity(items: list[Evidence], predicate: frozenset[str]) -> tuple[float, Evidence] | None:
    """A side's number for "more" or "fewer": the number in its claims nearest a word of the question's
    predicate ("a population of 7,212", "12 million copies"), scaled by a following "million"; years are
    dates, not quantities. None when no claim states one next to the predicate."""
    best: tuple[int, float, Evidence] | None = None
    for item in items:
        tokens = re.findall(r"[\w.,'-]+", item.claim.text)
        at = [
            index
            for index, token in enumerate(tokens)
            if canonical((content_stems(token.casefold().strip(".,")) or [""])[0]) in predicate
        ]
        for index, token in enumerate(tokens):
            raw = token.strip(".,")
            if not re.fullmatch(r"\d[\d,]*(?:\.\d+)?", raw) or (YEAR.fullmatch(raw) and "," not in raw):
                continue
            distance = min((abs(index - where) for where in at), default=None)
            if distance is None or distance > SAME_NEAR_WORDS + 2:
                continue
            following = tokens[index + 1].casefold().strip(".,") if index + 1 < len(tokens) else ""
            value = float(raw.replace(",", "")) * _SCALE.get(following, 1.0)
            if best is None or distance < best[0]:
                best = (distance, value, item)
    return (best[1], best[2]) if best else None


def _value_near(item: Evidence, noun: set[str]) -> str | None:
    """The claim's value for the noun: the name next to it ("Jiangsu province"), or, for a country or
    nationality, the nationality adjective of the sentence ("an American film director")."""
    value = _name_near(item, noun)
    if value:  # as the claim writes it
        written = re.search(r"\W+".join(map(re.escape, value.split())), item.claim.text, re.IGNORECASE)
        return written.group() if written else value
    if {canonical(stem) for stem in noun} & _NATIONALITY:
        found = [
            word
            for word in _ADJECTIVE_BEFORE_NOUN.findall(item.claim.text)
            if DEMONYM.search(word.casefold())
        ]
        return found[0] if found else None
    return None


def _role_names(items: list[Evidence], role: frozenset[str]) -> list[str]:
    """The names a side's claims give next to its role word, nearest first: "directed by Z" -> Z."""
    ranked: list[tuple[int, str]] = []
    for item in items:
        if not role & item.stems:
            continue
        tokens = words(item.claim.text)
        at = [
            index
            for index, token in enumerate(tokens)
            if canonical((content_stems(token) or [""])[0]) in role
        ]
        for name in item.names:
            first = words(name)[:1]
            if at and first and first[0] in tokens and not is_about(item.title, name):
                ranked.append((min(abs(tokens.index(first[0]) - index) for index in at), name))
    return [name for _, name in sorted(ranked)]


def _second_hop(items: list[Evidence], role: frozenset[str], evidence: list[Evidence]) -> list[Evidence]:
    """The claims of the page a side's claims name next to its role word: "directed by Z" on the film's
    page leads to Z's page, when Z's page was read."""
    pages = pages_of(evidence)
    own = {item.page for item in items}
    for name in _role_names(items, role):
        for page, claims in pages.items():
            if page not in own and is_named(claims[0].title, name):
                return claims
    return []


def _verdict(text: str, cites: list[str], claims: list[Claim]) -> DraftSentence | None:
    """A short composed sentence, kept only if it passes the same mechanical check as any other."""
    sentence = DraftSentence(text=text, cites=cites, section="")
    check, _ = classify(sentence, claims_by_source(claims))
    return sentence if check is SentenceCheck.ok else None


class Answerer:
    """Builds the Answer for one request."""

    def __init__(self, request: SynthesisInput, shape: QuestionShape) -> None:
        self.request = request
        self.shape = shape
        self.evidence = gather(request)
        self.weights = Weights.of(
            shape.relation | shape.predicate, [item.stems for item in self.evidence], shape.slot
        )

    def answer(self) -> Answer:
        if not self.evidence:
            return Answer([], [])
        if self.shape.form is Form.open:
            return self._open()
        return self._compared()

    # -- open questions: the best chain --------------------------------------------------------------

    def _open(self) -> Answer:
        weights = self.weights
        needed = ANSWER_MIN_SCORE * (weights.whole + SLOT_WEIGHT * weights.slot_whole)

        def both_named(chain: Chain) -> bool:
            pages = {link.page for link in chain.links}
            return len(pages) > 1 and all(names_title(self.shape.text, link.title) for link in chain.links)

        found = [
            chain
            for chain in chains(self.shape, self.evidence, weights)
            if chain_score(chain, weights) >= needed * (NAMED_CHAIN_SHARE if both_named(chain) else 1.0)
        ]
        if not found:
            return Answer([], self._related())
        best = found[0]
        lead = [_sentence(best.answer, "")]
        support = [_sentence(link, link.claim.subquestion_id) for link in best.links[:-1]]
        cited = {link.page for link in best.links}
        # Then what qualifies the answer: the pages its chain names (who "Ezer Weizman" in the answer is),
        # and the pages of the question's other names, each by its claim that bears most on the question.
        named = [name for link in best.links for name in link.names if _is_bridge(name, self.shape, link)]
        for name in [*named, *self.shape.entities]:
            if len(support) >= SUPPORT_MAX:
                break
            own = [item for item in self.evidence if is_named(item.title, name) and item.page not in cited]
            pick = _best(own, weights)
            # A page the chain names must bear on the question itself ("grew up in Ballina" does not);
            # a page the question names does by being named.
            bears = pick is not None and (
                name in self.shape.entities or weights.cover(pick.stems) + weights.slot_cover(pick.stems) > 0
            )
            if pick is not None and bears:
                support.append(_sentence(pick, pick.claim.subquestion_id))
                cited.add(pick.page)
        return Answer(lead, support)

    def _related(self) -> list[DraftSentence]:
        """When nothing answers: the claim that bears most on the question from each page the question
        is about, or, with no such page, from the pages that bear on it most; never nothing, since a run
        with verified evidence always ships a report (the first claim read, at worst)."""
        kinds = anchors(self.shape, self.evidence, self.weights)
        picks = [
            pick for page, items in pages_of(self.evidence).items() if (pick := _best(items, self.weights))
        ]
        anchored = [pick for pick in picks if kinds[pick.page] is not Anchor.none]
        bearing = [pick for pick in picks if self.weights.cover(pick.stems) > 0]
        chosen = anchored or bearing or picks[:1]
        chosen.sort(key=lambda item: -self.weights.cover(item.stems))
        return [_sentence(item, item.claim.subquestion_id) for item in chosen[:RELATED_MAX]]

    # -- comparisons: each side's deciding claim ---------------------------------------------------------

    def _compared(self) -> Answer:
        sides = {side: _side_evidence(side, self.evidence) for side in self.shape.sides}
        if not sides or not all(sides.values()):
            found = [
                _sentence(item, item.claim.subquestion_id) for items in sides.values() for item in items[:1]
            ]
            return Answer([], found or self._related())
        if self.shape.form is Form.both:
            answer = self._both(sides)
        elif self.shape.form is Form.same:
            answer = self._same(sides)
        else:
            answer = self._choice(sides)
        # Who or what each side is, when its deciding claim is not the sentence that defines its page.
        shown = {sentence.text for sentence in answer.lead}
        for items in sides.values():
            defining = next((item for item in items if item.first), None)
            if defining is not None and defining.claim.text not in shown:
                answer.support.append(_sentence(defining, defining.claim.subquestion_id))
        return answer

    def _deciding(self, items: list[Evidence], stems: frozenset[str]) -> Evidence:
        best = max(
            items, key=lambda item: (len(stems & item.stems), self.weights.cover(item.stems), item.first)
        )
        return best

    def _verdict(self, holds: bool, reason: str, deciding: list[Evidence]) -> DraftSentence | None:
        """ "Yes: ..." or "No: ...", citing the claims that decide it; the reason names the sides (and their
        values) in the claims' own words, so the sentence passes the mechanical check of any other. With a
        reason the claims do not support, the bare sides are named instead."""
        cites = list(dict.fromkeys(item.source_id for item in deciding))
        claims = [item.claim for item in self.evidence]
        word = "Yes" if holds else "No"
        bare = f"{word}: {' and '.join(self.shape.sides)}."
        for text in [f"{word}: {reason}."] * bool(reason) + [bare]:
            verdict = _verdict(text, cites, claims)
            if verdict is not None:
                return verdict
        return None

    def _both(self, sides: dict[str, list[Evidence]]) -> Answer:
        predicate = self.shape.predicate
        deciding = {side: self._deciding(items, predicate) for side, items in sides.items()}
        holding = [side for side, item in deciding.items() if predicate <= item.stems]
        holds = len(holding) == len(deciding)
        shown = self.shape.predicate_text
        if holds:
            reason = f"{' and '.join(deciding)} are both {shown}" if len(deciding) > 1 else f"{holding[0]}"
        else:
            lacking = [side for side in deciding if side not in holding]
            reason = f"the claims on {' and '.join(lacking)} do not say {shown}" if shown else ""
        verdict = self._verdict(holds, reason, list(deciding.values()))
        lead = [_sentence(item, "") for item in deciding.values()]
        return Answer([verdict, *lead] if verdict else lead, [])

    def _same(self, sides: dict[str, list[Evidence]]) -> Answer:
        """ "In the same province?": yes when the sides' claims name the same thing next to "province",
        no when they name different ones. A question about each side's someone ("directors from the same
        country") takes each side's second hop: the name next to the role word on the side's page
        ("directed by Z"), then the value on Z's own page. No verdict when a side's value is not found."""
        noun = set(content_stems(self.shape.same_noun))
        role = self.shape.predicate - {canonical(stem) for stem in noun}
        side_words = set().union(*(_name_words(side) for side in sides))
        values: dict[str, str] = {}
        deciding: dict[str, list[Evidence]] = {}
        for side, items in sides.items():
            # The page the side names by the role word comes first; the side's own page when none was read.
            hops = [items]
            if role and _role_names(items, role):  # "directed by Z": Z's own page decides, or nothing does
                hops = [hop] if (hop := _second_hop(items, role, self.evidence)) else []
            for own in hops:
                if side in values:
                    break
                for item in sorted(own, key=lambda item: not item.first):
                    value = _value_near(item, noun)
                    if value and not _name_words(value) <= side_words:
                        values[side] = value
                        links = [link for link in items if link.page != item.page and role & link.stems]
                        deciding[side] = [*links[:1], item]
                        break
        if len(values) < len(sides):
            found = [
                _sentence(item, item.claim.subquestion_id) for items in sides.values() for item in items[:1]
            ]
            return Answer([], found)  # cannot decide: the report says the answer was not found
        keys = {side: " ".join(sorted(_name_words(value))) for side, value in values.items()}
        holds = len(set(keys.values())) == 1
        reason = ", ".join(f"{values[side]} for {side}" for side in sides)
        chosen = [item for items in deciding.values() for item in items]
        verdict = self._verdict(holds, reason, chosen)
        lead = [_sentence(item, "") for item in chosen]
        return Answer([verdict, *lead] if verdict else lead, [])

    def _choice(self, sides: dict[str, list[Evidence]]) -> Answer:
        predicate = self.shape.predicate
        deciding = {side: self._deciding(items, predicate) for side, items in sides.items()}
        winner: str | None = None
        if self.shape.order in (Order.most, Order.least):
            counted = {side: found for side, items in sides.items() if (found := _quantity(items, predicate))}
            if len(counted) == len(sides) and len({value for value, _ in counted.values()}) == len(counted):
                ranked = sorted(counted, key=lambda side: counted[side][0])
                winner = ranked[-1] if self.shape.order is Order.most else ranked[0]
                deciding.update({side: item for side, (_, item) in counted.items()})
        elif self.shape.order in (Order.earliest, Order.latest):
            dated: dict[str, Date] = {}
            for side, items in sides.items():
                read = [(found, item) for item in items if (found := _event_date(item.claim.text, predicate))]
                if read:
                    (_, dated[side]), deciding[side] = max(
                        read, key=lambda pair: (pair[0][0], pair[1].first, -items.index(pair[1]))
                    )
            if len(dated) == len(sides) and len(set(dated.values())) == len(dated):
                ranked = sorted(dated, key=lambda side: dated[side])
                winner = ranked[0] if self.shape.order is Order.earliest else ranked[-1]
        if winner is None and self.shape.order not in (Order.earliest, Order.latest):
            # No number on every side ("a more varied career"): the side whose claim shows the predicate.
            shown = {side: len(predicate & item.stems) for side, item in deciding.items()}
            top = max(shown.values())
            leaders = [side for side, count in shown.items() if count == top]
            if top and len(leaders) == 1:
                winner = leaders[0]
        order = sorted(deciding, key=lambda side: side != winner)
        lead = [_sentence(deciding[side], "") for side in order]
        if winner is not None:
            claims = [item.claim for items in sides.values() for item in items]
            verdict = _verdict(f"The answer is {winner}.", [deciding[winner].source_id], claims)
            if verdict is not None:
                lead.insert(0, verdict)
        return Answer(lead, [])
