"""Answers from verified claims, by rules: which claims answer the question, which support the answer,
and which entities a second research round should look up.

The extractive synthesiser writes its report from `answer`, and the extractive planner asks follow-up
questions about what `bridges` finds. Only verified claims and the titles of their pages are read. Every
sentence proposed is a verified claim, or a short verdict ("The answer is no.") followed by the claims
that decide it; when the claims do not answer the question, no answer is proposed at all.

A multi-hop question reaches its answer through a chain: a claim on a page the question is about (the
anchor) names another entity (the bridge), or a claim on the bridge's page names the anchor, and a claim
on the bridge's page states what the question asks. A page is an anchor when the question names its title
outright, less surely when its title contains one of the question's names, least when a claim on it
matches what the question describes ("the runner-up in the 1999 World Drivers' Championship"). The best
chain shows most of the question's relation words (each weighted by how rare it is among the claims) and
of the words next to its question word, discounted by how sure its anchor is; below a threshold, nothing
answers. The constants were set on hotpotqa-100 with and without each question's gold pages.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum

from citeflow.checks import claims_by_source, classify
from citeflow.contracts import Claim, ClaimStatus, DraftSentence, SentenceCheck, SynthesisInput
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
# The words next to the question word count this many times more in the claim that answers.
SLOT_WEIGHT = 2.0
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
            stems=frozenset(content_stems(claim.text)),
            names=tuple(claim_names(claim.text)),
            first=claim.quote_start is not None and claim.quote_start == earliest.get(claim.page_id),
        )
        for claim in claims
    ]


@dataclass
class Weights:
    """How much each relation stem counts: a stem most claims share ("film") tells chains apart less.
    Stems next to the question word count again in an answering claim, by their nearness."""

    relation: frozenset[str]
    slot: dict[str, float] = field(default_factory=dict)
    weight: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(
        cls, relation: frozenset[str], evidence: list[Evidence], slot: tuple[tuple[str, float], ...] = ()
    ) -> Weights:
        total = max(len(evidence), 1)
        near = dict(slot)
        weight = {}
        for stem in relation | set(near):
            count = sum(stem in item.stems for item in evidence)
            weight[stem] = math.log(1 + total / (1 + count)) + 0.1
        return cls(relation, near, weight)

    def cover(self, stems: Iterable[str]) -> float:
        return sum(self.weight[stem] for stem in set(stems) & self.relation)

    def slot_cover(self, stems: Iterable[str]) -> float:
        return sum(self.weight[stem] * self.slot[stem] for stem in set(stems) & set(self.slot))

    @property
    def whole(self) -> float:
        return self.cover(self.relation)

    @property
    def mean(self) -> float:
        """The weight of a typical relation stem (1.0 for a question with none)."""
        return self.whole / len(self.relation) if self.relation else 1.0

    @property
    def slot_whole(self) -> float:
        return self.slot_cover(self.slot)


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
    return bool(set(content_words(text)) - asked)


class Anchor(IntEnum):
    """How surely a page is one the question is about; a chain starts on an anchor page."""

    none = 0
    described = 1  # a claim on it shows much of what the question says: "the runner-up in the 1999 ..."
    titled = 2  # its title contains one of the question's names, or is contained in one
    named = 3  # the question names everything its title names


# How far a chain from each kind of anchor page is trusted. A chain from a page the question names is
# taken at its word; one from a page the question only describes must show nearly all of the question
# to pass, since with the right pages missing a page of the same description still matches it.
# (On hotpotqa-100 with each question's gold pages removed, lower trust said "answered" more often.)
ANCHOR_TRUST = {Anchor.none: 0.0, Anchor.described: 0.25, Anchor.titled: 0.33, Anchor.named: 1.0}


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
    kinds = {}
    for page, items in pages_of(evidence).items():
        title = items[0].title
        if names_title(shape.text, title):
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
    stems = frozenset().union(*(item.stems for item in items))
    mentioned = sum(any(mentions(item.claim.text, name) for item in items) for name in others)
    return weights.cover(stems) + mentioned * weights.mean


def chain_score(chain: Chain, weights: Weights) -> float:
    """How well the chain answers: the relation it shows, the answering claim's words next to the
    question word, discounted by how surely its anchor is what the question is about."""
    shown = chain.cover + SLOT_WEIGHT * weights.slot_cover(chain.answer.stems)
    return shown * ANCHOR_TRUST[chain.anchor]


@dataclass(frozen=True)
class Bridge:
    name: str
    query: str


def bridges(shape: QuestionShape, evidence: list[Evidence], limit: int) -> list[Bridge]:
    """Entities the verified claims lead to that a second round should look up, with the relation words
    their claims still lack (what the other page must say): names in the claims of anchor pages, best
    claims first, and the subjects of pages found by description (whose own page is read already, so
    the search is for pages that name them: "the runner-up in the 1999 ... appears on the cover of ...").
    Comparisons name both their sides and need none."""
    if shape.form is not Form.open or limit < 1:
        return []
    weights = Weights.of(shape.relation, evidence, shape.slot)
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
            if content_stems(word) and content_stems(word)[0] in shape.relation - item.stems
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
        if token not in STOPWORDS and content_stems(token)[:1] and content_stems(token)[0] in weights.relation
    ]
    return min(near, default=BRIDGE_NEAR_WORDS)


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


def _date(text: str) -> tuple[int, int, int] | None:
    """The first date a claim states, as (year, month, day); month and day 0 when it gives a year only."""
    found: list[tuple[int, tuple[int, int, int]]] = []
    for match in _DAY_MONTH_YEAR.finditer(text):
        month = _MONTHS.get(match.group(2).casefold())
        if month:
            found.append((match.start(), (int(match.group(3)), month, int(match.group(1)))))
    for match in _MONTH_DAY_YEAR.finditer(text):
        month = _MONTHS.get(match.group(1).casefold())
        if month:
            found.append((match.start(), (int(match.group(3)), month, int(match.group(2)))))
    if not found:
        found = [(match.start(), (int(match.group(1)), 0, 0)) for match in YEAR.finditer(text)]
    return min(found)[1] if found else None


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
        self.weights = Weights.of(shape.relation | shape.predicate, self.evidence, shape.slot)

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

    def _both(self, sides: dict[str, list[Evidence]]) -> Answer:
        predicate = self.shape.predicate
        deciding = {side: self._deciding(items, predicate) for side, items in sides.items()}
        holds = all(predicate <= item.stems for item in deciding.values())
        verdict = DraftSentence(text=f"The answer is {'yes' if holds else 'no'}.", section="")
        return Answer([verdict, *(_sentence(item, "") for item in deciding.values())], [])

    def _same(self, sides: dict[str, list[Evidence]]) -> Answer:
        """ "In the same province?": yes when the sides' claims name the same thing next to "province",
        no when they name different ones; no verdict when a side's claims never say "province"."""
        noun = set(content_stems(self.shape.same_noun))
        side_words = set().union(*(_name_words(side) for side in sides))
        values: dict[str, set[str]] = {}
        deciding: dict[str, Evidence] = {}
        for side, items in sides.items():
            deciding[side] = self._deciding(items, frozenset(noun))
            for item in items:
                value = _name_near(item, noun)
                if value and not _name_words(value) <= side_words:
                    values[side], deciding[side] = {" ".join(sorted(_name_words(value)))}, item
                    break
        lead = [_sentence(item, "") for item in deciding.values()]
        if len(values) == len(sides):
            first, *rest = values.values()
            shared = first.intersection(*rest)
            lead.insert(0, DraftSentence(text=f"The answer is {'yes' if shared else 'no'}.", section=""))
        return Answer(lead, [])

    def _choice(self, sides: dict[str, list[Evidence]]) -> Answer:
        predicate = self.shape.predicate
        deciding = {side: self._deciding(items, predicate) for side, items in sides.items()}
        winner: str | None = None
        if self.shape.order is not None:
            dated: dict[str, tuple[int, int, int]] = {}
            for side, items in sides.items():
                with_date = [item for item in items if _date(item.claim.text)]
                if with_date:
                    deciding[side] = self._deciding(with_date, predicate)
                    dated[side] = _date(deciding[side].claim.text) or (0, 0, 0)
            if len(dated) == len(sides) and len(set(dated.values())) == len(dated):
                ranked = sorted(dated, key=lambda side: dated[side])
                winner = ranked[0] if self.shape.order is Order.earliest else ranked[-1]
        else:
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
