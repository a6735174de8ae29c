"""The digest of an open question: every distinct finding among the verified claims, once, citing every
page that states it.

1. Claims about the question's subject are kept: a claim that shares none of the question's words, or
   whose page never names the question's names (in its title or its claims), is about something else
   and never ships; nor does a quote that is no sentence (a headline, a heading).
2. Near-duplicates are merged into one finding: a claim from another page joins a finding when it holds at
   least half of the finding's sentence's content stems and gives no other number (the share the
   citation checks need to keep its page among the sentence's citations, citeflow/checks.py). The
   finding's sentence is the one of its verified quotes closest to all the others (their medoid: the
   words most of its pages use); it cites every page whose claim joins that quote, and every page whose
   quotes within one passage (PASSAGE_CHARS) together hold that share.
3. Claims that say the same of the same thing with different numbers next to the same word ("900 hp",
   "1,025 hp") are not merged: they are a conflict, shown side by side. A number in a name is no
   disagreement.
4. Findings are chosen by maximal marginal relevance: how much of the evidence a finding covers (its
   pages) times how close it is to the question (the aspects asked about weigh most; the subject's
   names, which every page repeats, are no aspect), times how much it says beyond the question's own
   words (a sentence that restates the question is framing, not a finding), times how much its pages
   are about what the question asks (the mean closeness of their claims: background every page
   repeats, such as when a company was founded, is cited by pages about anything), less how much it
   repeats a finding already chosen; up to `findings_max` findings and `words_max` words. A finding cites only
   pages whose verified quotes agree with its sentence in polarity (the checks read every quote of a
   cited page), and one whose own page says "not" of it is skipped.
5. The follow-up round asks about each aspect again with the words its first-round claims name far more
   than the other claims (relevance feedback): pages are read again for what they say in other words.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from functools import cached_property

from citeflow.contracts import Claim, ClaimStatus, DraftSentence, SubQuestion, SynthesisInput
from citeflow.text import content_stems, content_words, names, normalise, numbers, stem
from citeflow.verify import negated_scopes, polarity_conflict

# A claim joins a finding when it holds this share of the finding sentence's content stems: the share at
# which the citation checks keep a citation that repeats what another citation covers.
MERGE_MIN_SHARE = 0.5
# ... and the finding's sentence holds this share of the claim's (rarity-weighted) stems: a short sentence
# ("The strike began on a Monday.") holds little of a longer claim that only shares its subject.
MEMBER_MIN_SHARE = 0.4
# Two claims holding this share of each other's stems (numbers aside) speak of the same thing: with
# different numbers they disagree.
CONFLICT_MIN_SHARE = 0.6
# Maximal marginal relevance: the weight of a finding's own worth against its repetition of those chosen.
MMR_LAMBDA = 0.7
# A candidate repeating a chosen finding this much (cosine of their stems) is the same finding.
REPEAT_MAX_SIMILARITY = 0.6
# The opening states this many of the most corroborated findings.
OPENING_FINDINGS = 2
# Conflicts shown side by side, at most.
CONFLICTS_MAX = 3
# The question's own asking words, never evidence of a claim's subject.
_ASKING = frozenset(
    content_stems("source sources report reported say says said know known latest context describe explain")
)
DIFFER_SECTION = "differ"
# The aspects a question asks "about" weigh this much more than its subject's words, which every page
# repeats. Set on summhay-dev (2 -> 5: joint 0.082 -> 0.085).
FOCUS_WEIGHT = 5.0
# A finding's worth is its corroboration (pages) to this power times its closeness to the question to the
# rest: a product, so that neither alone carries a finding (background every page repeats, far from the
# question; a restatement of the question by one page). Set on summhay-dev's Dodge questions (0.6, 0.7,
# 0.75, 0.85: joint 0.477, 0.483, 0.485, 0.470; the weighted sum 0.6 / 0.4 it replaced: 0.455) and checked
# on its SVB questions (0.407 -> 0.424 at 0.75), replaying the verified claims of one eval store.
PAGES_POWER = 0.75
# A claim's closeness to the question is read in its context: the mean closeness of its page's claims,
# each weighted by exp(-distance / CONTEXT_CHARS) from it (itself by 1). Set on summhay-dev's Dodge
# questions (75, 150, 200, 300, 600 characters: joint 0.550, 0.546, 0.538, 0.529, 0.506; none 0.507) and
# checked on its SVB questions (0.435 none -> 0.467 at 150), replaying the claims of one eval store.
CONTEXT_CHARS = 150
# A page corroborates a finding when its quotes within one passage of this many characters hold the
# share the checks need (`_corroborating`): quotes far apart on a page, about other things, share words
# by chance. Set on summhay-dev's Dodge questions (300, 600, 1,000, 2,000 characters, the whole page:
# citation F1 0.583, 0.596, 0.598, 0.588, 0.580) and checked on its SVB questions (0.541 whole page ->
# 0.558 at 1,000), replaying the claims of one eval store; coverage does not change.
PASSAGE_CHARS = 1000


@dataclass(frozen=True)
class Quoted:
    """One verified quote of a page: where it starts (None when its claim has no offsets) and what it says."""

    start: int | None
    stems: frozenset[str]
    numbers: frozenset[str]
    scopes: tuple[set[str], ...]


@dataclass
class PageSaid:
    """All a page's verified quotes say, as the citation checks read them, each by its place on the page. A
    page agrees with a finding in polarity by all of it (`stems`, `scopes`), and corroborates it by a
    passage of it (`passages`): its claims about another aspect of the question too. Read once all the
    page's quotes are gathered."""

    quotes: list[Quoted] = field(default_factory=list)

    @cached_property
    def stems(self) -> set[str]:
        """The content stems of all its quotes."""
        return {word for quote in self.quotes for word in quote.stems}

    @cached_property
    def scopes(self) -> list[set[str]]:
        """The scopes of all its quotes' negations."""
        return [scope for quote in self.quotes for scope in quote.scopes]

    @cached_property
    def passages(self) -> list[tuple[set[str], set[str]]]:
        """(stems, numbers) of the quotes starting within PASSAGE_CHARS after each quote (a quote without
        offsets stands alone)."""
        found = [(set(quote.stems), set(quote.numbers)) for quote in self.quotes if quote.start is None]
        placed = sorted(
            ((quote.start, quote) for quote in self.quotes if quote.start is not None),
            key=lambda pair: pair[0],
        )
        for index, (start, _) in enumerate(placed):
            near = [quote for at, quote in placed[index:] if at - start <= PASSAGE_CHARS]
            found.append(
                (
                    {word for quote in near for word in quote.stems},
                    {number for quote in near for number in quote.numbers},
                )
            )
        return found


@dataclass(frozen=True)
class Item:
    """A verified claim as the digest weighs it."""

    claim: Claim
    source_id: str
    stems: frozenset[str]
    numbers: frozenset[str]
    relevance: float = 0.0
    # (word, number) for each number and the content word next to it: what the number measures.
    measures: frozenset[tuple[str, str]] = frozenset()
    # The share of its stems that the question does not hold: what it says beyond restating the question.
    specificity: float = 1.0


@dataclass
class Finding:
    """One distinct finding: its sentence (the lead claim's quote) and every claim that states it."""

    lead: Item
    members: list[Item] = field(default_factory=list)
    # Pages no one claim of which restates the sentence, but whose claims together do (a page may say
    # a finding over two sentences): they corroborate it, without their claims being merged into it.
    corroborating: list[str] = field(default_factory=list)

    @property
    def pages(self) -> list[str]:
        """The source ids of the independent pages that state it, the lead's first."""
        members = [item.source_id for item in self.members]
        return list(dict.fromkeys([self.lead.source_id, *members, *self.corroborating]))

    section_id: str = ""

    @property
    def section(self) -> str:
        return self.section_id or self.lead.claim.subquestion_id

    def sentence(self, section: str | None = None) -> DraftSentence:
        text = " ".join(self.lead.claim.quote.split())
        return DraftSentence(
            text=text, cites=self.pages, section=self.section if section is None else section
        )


@dataclass
class Digest:
    opening: list[Finding]
    grouped: list[Finding]
    conflicts: list[tuple[Item, Item]]

    def sentences(self) -> list[DraftSentence]:
        """The opening (section ""), then the other findings in their sub-questions' sections, then each
        conflict's two claims side by side (section DIFFER_SECTION)."""
        drafted = [finding.sentence("") for finding in self.opening]
        drafted += [finding.sentence() for finding in self.grouped]
        for first, second in self.conflicts:
            drafted += [
                DraftSentence(
                    text=" ".join(item.claim.quote.split()), cites=[item.source_id], section=DIFFER_SECTION
                )
                for item in (first, second)
            ]
        return drafted


def _share(part: AbstractSet[str], whole: frozenset[str]) -> float:
    return len(part & whole) / len(whole) if whole else 0.0


# A finding is a sentence: it begins and ends as one, quotes and brackets aside.
_SENTENCE = re.compile(r"[\"'(\u201c\u2018]*\w.*[.!?][\"')\u201d\u2019]*", re.DOTALL)


def _items(request: SynthesisInput) -> list[Item]:
    """The verified claims, each page's quote once, that are about the question's subject, weighted by
    how much of the question they hold (each question stem by its rarity among the claims)."""
    titles = {source.id: source.title for source in request.sources}
    seen: set[tuple[str, str]] = set()
    claims = []
    for claim in request.claims:
        key = (claim.page_id, " ".join(claim.quote.split()))
        if claim.status is ClaimStatus.verified and claim.source_id in titles and key not in seen:
            seen.add(key)
            claims.append(claim)
    question = frozenset(content_stems(request.question))
    asked = question - _ASKING
    # The aspects asked "about" weigh FOCUS_WEIGHT times: the rest of the question (its subject) every
    # page repeats.
    focus = frozenset(stem for text, _ in aspects(request.question) for stem in content_stems(text)) - _ASKING
    # ... and the words the follow-up round asked about them with; but not the subject's names when an
    # aspect repeats them ("the impact of SVB's collapse on venture capital", of "the Silicon Valley Bank
    # Collapse"): every page names it, about anything. On summhay-dev (replaying one eval store's claims)
    # this raised joint 0.467 -> 0.519 on the SVB questions; the Dodge ones 0.546 -> 0.537.
    focus = (focus | follow_up_terms(request.subquestions)) - subject_named(request.question)
    subject = frozenset(stem for name in names(request.question) for stem in content_stems(name)) - _ASKING
    bags = [frozenset(content_stems(claim.quote)) for claim in claims]
    frequency = Counter(stem for bag in bags for stem in bag if stem in asked)
    weight = {
        stem: math.log(1 + len(bags) / count) * (FOCUS_WEIGHT if stem in focus else 1.0)
        for stem, count in frequency.items()
    }
    total = sum(weight.values()) or 1.0
    # A page is about the question's subject when its title or one of its claims names it; a claim of such
    # a page may say "the strike" for "the Harbour strike".
    on_subject = {
        claim.page_id
        for claim, bag in zip(claims, bags, strict=True)
        if not subject or (bag | frozenset(content_stems(titles[claim.source_id or ""]))) & subject
    }
    items = []
    for claim, bag in zip(claims, bags, strict=True):
        if not _SENTENCE.fullmatch(claim.quote.strip()):
            continue  # a headline ("Harbour strike closes the port"), a heading or a fragment ('..."), or')
        if not bag & asked or claim.page_id not in on_subject:
            continue  # about something else: never evidence for this question
        if focus and not bag & focus:
            continue  # about the subject, but none of the aspects asked about
        items.append(
            Item(
                claim=claim,
                source_id=claim.source_id or "",
                stems=bag,
                numbers=frozenset(numbers(claim.quote)),
                measures=measures(claim.quote),
                relevance=sum(weight.get(stem, 0.0) for stem in bag & asked) / total,
                specificity=len(bag - question) / len(bag),
            )
        )
    return _in_context(items)


def _in_context(items: list[Item]) -> list[Item]:
    """Each item with its closeness smoothed over the claims around it on its page (CONTEXT_CHARS). A key
    fact is often stated in words the question does not use ("shorter loan tenures" for "lending
    conditions") within a passage that uses them; a fact of another aspect sits in a passage about that
    one. On summhay-dev (`citeflow eval`) this raised nugget coverage 0.677 -> 0.738 on the Dodge questions
    and 0.604 -> 0.639 on the SVB ones."""
    by_page: dict[str, list[Item]] = {}
    for item in items:
        by_page.setdefault(item.claim.page_id, []).append(item)
    smoothed = []
    for item in items:
        start = item.claim.quote_start
        weighted = [
            (math.exp(-abs(other.claim.quote_start - start) / CONTEXT_CHARS), other.relevance)
            for other in by_page[item.claim.page_id]
            if other is not item and start is not None and other.claim.quote_start is not None
        ]
        total = 1 + sum(weight for weight, _ in weighted)
        relevance = (item.relevance + sum(weight * other for weight, other in weighted)) / total
        smoothed.append(replace(item, relevance=relevance))
    return smoothed


_NUMBER_WORDS = re.compile(r"[A-Za-z][\w'-]*|\d[\d,.]*%?")


def measures(text: str) -> frozenset[tuple[str, str]]:
    """(stem, number) for each number of the text and the content words either side of it: "reached
    1,025 hp" -> {("reach", "1025"), ("hp", "1025")}."""
    tokens = _NUMBER_WORDS.findall(normalise(text))
    found = set()
    for index, token in enumerate(tokens):
        if not token[0].isdigit() or not (value := numbers(token)):
            continue
        for neighbour in (
            tokens[index - 1] if index else "",
            tokens[index + 1] if index + 1 < len(tokens) else "",
        ):
            found.update(
                (stemmed, value[0]) for stemmed in content_stems(neighbour) if not stemmed[0].isdigit()
            )
        if token.endswith("%"):
            found.add(("%", value[0]))
    return frozenset(found)


def _conflicting(first: Item, second: Item) -> bool:
    """The same quantity with another value: each gives a number the other lacks, next to the same word
    ("900 hp" and "1,025 hp"). A number that is part of a name ("the Model 3") beside another quantity
    ("65% ethanol") is no disagreement."""
    own_first = {(stem, number) for stem, number in first.measures if number not in second.numbers}
    own_second = {(stem, number) for stem, number in second.measures if number not in first.numbers}
    return bool({stem for stem, _ in own_first} & {stem for stem, _ in own_second})


def _weighted_share(part: AbstractSet[str], whole: frozenset[str], rarity: dict[str, float]) -> float:
    total = sum(rarity.get(stem, 1.0) for stem in whole)
    return sum(rarity.get(stem, 1.0) for stem in part & whole) / total if total else 0.0


def _joins(item: Item, lead: Item, rarity: dict[str, float]) -> bool:
    """Whether `item` states what `lead` states: it holds half of the lead's stems (what the citation
    checks need) and half of them weighted by rarity (words every page repeats, such as the subject's
    name, make no two claims the same), the lead holds MEMBER_MIN_SHARE of the claim's; no other number."""
    return (
        item.source_id != lead.source_id
        and _share(item.stems, lead.stems) >= MERGE_MIN_SHARE
        and _weighted_share(item.stems, lead.stems, rarity) >= MERGE_MIN_SHARE
        and _weighted_share(lead.stems, item.stems, rarity) >= MEMBER_MIN_SHARE
        and not _conflicting(item, lead)
    )


def rarity_of(items: list[Item]) -> dict[str, float]:
    """Each stem's inverse document frequency among the claims."""
    frequency = Counter(stem for item in items for stem in item.stems)
    return {stem: math.log(1 + len(items) / count) for stem, count in frequency.items()}


def _cosine(first: frozenset[str], second: frozenset[str]) -> float:
    return len(first & second) / math.sqrt(len(first) * len(second)) if first and second else 0.0


def _conflicts(items: list[Item]) -> list[tuple[Item, Item]]:
    """Pairs of claims from different pages saying the same thing (numbers aside) with other numbers."""
    found: list[tuple[Item, Item]] = []
    used: set[str] = set()
    for index, first in enumerate(items):
        for second in items[index + 1 :]:
            if first.source_id == second.source_id or not _conflicting(first, second):
                continue
            words_a, words_b = first.stems - first.numbers, second.stems - second.numbers
            if min(_share(words_a, words_b), _share(words_b, words_a)) < CONFLICT_MIN_SHARE:
                continue
            if first.claim.id in used or second.claim.id in used:
                continue
            used |= {first.claim.id, second.claim.id}
            found.append((first, second))
    return found[:CONFLICTS_MAX]


def select_findings(
    items: list[Item],
    findings_max: int,
    words_max: int,
    said: dict[str, PageSaid],
) -> list[Finding]:
    """Findings chosen one at a time by maximal marginal relevance, each taking the claims it merges;
    stops at `findings_max` findings or before `words_max` words. A finding cites only pages whose quotes
    (`said`, by source) agree with its sentence in polarity (`_agreeing`), and one whose own page does not
    is skipped. Other pages corroborate a finding by what their quotes say together (`_corroborating`)."""
    rarity = rarity_of(items)
    candidates = {
        item.claim.id: Finding(item, [other for other in items if _joins(other, item, rarity)])
        for item in items
    }
    most_pages = max((len(finding.pages) for finding in candidates.values()), default=1)
    best_relevance = max((item.relevance for item in items), default=1.0) or 1.0
    page_focus = _page_focus(items)
    focus_of = {claim_id: _focus(finding, page_focus) for claim_id, finding in candidates.items()}
    best_focus = max(focus_of.values(), default=1.0) or 1.0

    def worth(finding: Finding) -> float:
        # Corroboration (pages, log-scaled), closeness to the question and its pages' focus, each on 0..1.
        # On summhay-dev (`citeflow eval`, 18 questions) the focus raised nugget coverage 0.577 -> 0.654
        # on the Dodge questions and 0.438 -> 0.472 on the SVB ones, joint 0.355 -> 0.393 overall.
        pages = math.log(1 + len(finding.pages)) / math.log(1 + most_pages)
        closeness = finding.lead.relevance / best_relevance
        focus = focus_of[finding.lead.claim.id] / best_focus
        return pages**PAGES_POWER * closeness ** (1 - PAGES_POWER) * finding.lead.specificity * focus

    chosen: list[Finding] = []
    used: set[str] = set()
    words = 0
    while len(chosen) < findings_max:
        best, best_score = None, -math.inf
        for finding in candidates.values():
            if finding.lead.claim.id in used:
                continue
            repeat = max((_cosine(finding.lead.stems, kept.lead.stems) for kept in chosen), default=0.0)
            if repeat >= REPEAT_MAX_SIMILARITY:
                continue
            score = MMR_LAMBDA * worth(finding) - (1 - MMR_LAMBDA) * repeat
            if score > best_score:
                best, best_score = finding, score
        if best is None:
            break
        if _negated_by_its_page(best.lead, said):
            used.add(best.lead.claim.id)  # its page says "not" of what it says: it would not pass the checks
            continue
        # Each claim is stated once: the claims a finding merges are no finding of their own, nor do they
        # corroborate a later one.
        found = [item for item in [best.lead, *best.members] if item.claim.id not in used]
        lead = _medoid(found)
        if _negated_by_its_page(lead, said):
            lead = best.lead
        length = len(lead.claim.quote.split())
        if chosen and words + length > words_max:
            break
        members = [item for item in candidates[lead.claim.id].members if item.claim.id not in used]
        chosen.append(Finding(lead, members))
        used |= {item.claim.id for item in [*found, *members]}
        words += length
    for finding in chosen:
        finding.corroborating = _corroborating(finding, said, rarity)
        _agreeing(finding, said)
    return chosen


def _negated_by_its_page(item: Item, said: dict[str, PageSaid]) -> str:
    page = said[item.source_id]
    return polarity_conflict(item.claim.quote, page.stems, page.scopes)


def _medoid(items: list[Item]) -> Item:
    """The claim closest to all the others (the sum of its cosines to them): of the quotes that state a
    finding, the one that says most of what they share, in the words most of them use. Stating a finding
    by its medoid rather than by the claim that ranked it raised nugget coverage on summhay-dev from
    0.654 to 0.677 (Dodge questions) and from 0.472 to 0.514 (SVB questions)."""
    return max(
        items, key=lambda item: sum(_cosine(item.stems, other.stems) for other in items if other is not item)
    )


def _page_focus(items: list[Item]) -> dict[str, float]:
    """Each page's mean closeness to the question over its claims about the subject: how much the page is
    about what the question asks. The mean counts one more claim of the mean closeness of all, so that a
    page with a single claim is not judged by that claim alone (one that restates the question would
    make its page look the most focused of all)."""
    closeness: dict[str, list[float]] = {}
    for item in items:
        closeness.setdefault(item.source_id, []).append(item.relevance)
    prior = sum(item.relevance for item in items) / len(items) if items else 0.0
    return {source: (sum(values) + prior) / (len(values) + 1) for source, values in closeness.items()}


def _focus(finding: Finding, page_focus: dict[str, float]) -> float:
    """The mean focus of the pages that state a finding."""
    pages = finding.pages
    return sum(page_focus[page] for page in pages) / len(pages)


def _agreeing(finding: Finding, said: dict[str, PageSaid]) -> None:
    """Keep, of the finding's pages, those whose verified quotes, together with those of the pages kept
    before them, agree with its sentence in polarity: the checks judge a sentence against every quote of
    every page it cites, and a page that says "not" of the sentence's words would sink it."""
    sentence = finding.lead.claim.quote
    lead = said[finding.lead.source_id]
    stems, scopes = set(lead.stems), list(lead.scopes)
    kept = {finding.lead.source_id}
    for page in finding.pages[1:]:
        more = said[page]
        if not polarity_conflict(sentence, stems | more.stems, scopes + more.scopes):
            stems |= more.stems
            scopes += more.scopes
            kept.add(page)
    finding.members = [item for item in finding.members if item.source_id in kept]
    finding.corroborating = [page for page in finding.corroborating if page in kept]


def _corroborating(finding: Finding, said: dict[str, PageSaid], rarity: dict[str, float]) -> list[str]:
    """The other pages whose quotes in one passage (`PageSaid.passages`) together hold MERGE_MIN_SHARE of
    the finding's sentence's stems, plain and weighted by rarity (what the citation checks need to keep a
    citation), and each number it gives."""
    lead = finding.lead
    return [
        source
        for source, page in said.items()
        if source not in finding.pages
        and any(
            lead.numbers <= given
            and _share(stems, lead.stems) >= MERGE_MIN_SHARE
            and _weighted_share(stems, lead.stems, rarity) >= MERGE_MIN_SHARE
            for stems, given in page.passages
        )
    ]


def _aspect_of(finding: Finding, subquestions: list[SubQuestion]) -> str:
    """The sub-question a finding is grouped under: of the plan's sub-questions after the first (the
    question itself), the one whose own words (its text, minus the question's usual words) the finding's
    sentence holds most of; else the sub-question its claim answered. A follow-up (`follow_ups`) is never
    a heading: its claims are grouped under the aspect it asked about again."""
    plan = [sub for sub in subquestions if not sub.text.startswith(_FOLLOW_UP_PREFIX)]
    answered = next((sub for sub in subquestions if sub.id == finding.lead.claim.subquestion_id), None)
    best, best_shared = _followed(answered, plan) if answered else finding.lead.claim.subquestion_id, 0
    for sub in plan[1:]:
        own = frozenset(content_stems(sub.text)) - _ASKING
        shared = len(own & finding.lead.stems)
        if shared > best_shared:
            best, best_shared = sub.id, shared
    return best


def _followed(sub: SubQuestion, plan: list[SubQuestion]) -> str:
    """The plan's sub-question a follow-up asked about again (the question's own when no aspect of the
    plan is it); any other sub-question is its own."""
    if not sub.text.startswith(_FOLLOW_UP_PREFIX):
        return sub.id
    aspect = sub.text.removeprefix(_FOLLOW_UP_PREFIX).rsplit(":", 1)[0]
    asked = (item.id for item in plan if item.text == f"{_ASPECT_PREFIX}{aspect}?")
    return next(asked, plan[0].id if plan else sub.id)


def digest(request: SynthesisInput, findings_max: int, words_max: int) -> Digest:
    """The digest of the request's verified claims: an opening of the most corroborated findings, the
    others by sub-question, and the claims that disagree."""
    items = _items(request)
    conflicts = _conflicts(items)
    disputed = {item.claim.id for pair in conflicts for item in pair}
    # A page corroborates a finding by all it says, as the checks read it: its claims about another
    # aspect of the question too (on summhay-dev, 3 in 10 of the pages stating a covered key fact that
    # were read and not cited held half of its sentence's words or more in such claims; citing them
    # raised citation F1 0.544 -> 0.572 on the Dodge questions, 0.446 -> 0.459 on the SVB ones).
    said: dict[str, PageSaid] = {}
    for claim in request.claims:
        if claim.status is ClaimStatus.verified and claim.source_id:
            said.setdefault(claim.source_id, PageSaid()).quotes.append(
                Quoted(
                    claim.quote_start,
                    frozenset(content_stems(claim.quote)),
                    frozenset(numbers(claim.quote)),
                    tuple(negated_scopes(claim.quote)),
                )
            )
    findings = select_findings(
        [item for item in items if item.claim.id not in disputed], findings_max, words_max, said
    )
    for finding in findings:
        finding.section_id = _aspect_of(finding, request.subquestions)
    ranked = sorted(findings, key=lambda finding: -len(finding.pages))
    opening = [finding for finding in ranked[:OPENING_FINDINGS] if len(finding.pages) > 1] or ranked[:1]
    grouped = [finding for finding in findings if finding not in opening]
    return Digest(opening=opening, grouped=grouped, conflicts=conflicts)


_TOPIC = re.compile(
    r"\b(?:about|regarding|concerning|surrounding|(?:latest|news|updates?) on)\s+(.+?)[?.!]*$", re.IGNORECASE
)
_QUOTED = re.compile(r'"([^"]{3,})"')
_ASPECT_PREFIX = "What do the sources report about "
# A query keeps at most this many words of the question's subject beside an aspect's own words.
SUBJECT_QUERY_WORDS = 8


def _subject(question: str, topic: re.Match[str]) -> list[str]:
    """The words of the question's subject: its quoted title, else the names before its topic."""
    quoted = _QUOTED.findall(question)
    if quoted:
        return content_words(" ".join(quoted))
    return [word.casefold() for word in names(question[: topic.start()])]


# An acronym is read from this many consecutive capitalised words or more ("Silicon Valley Bank" ->
# "svb"): two-letter initials are too often a word of their own.
ACRONYM_MIN_WORDS = 3


def subject_named(question: str) -> frozenset[str]:
    """The stems of the names in the question's topic that name its subject (`_subject`): its words, or an
    acronym of a run of its capitalised words ("SVB" for "Silicon Valley Bank"). A lower-case word of the
    subject in the topic ("the fuel's impact on performance", of "... Performance and Trends") may be what
    is asked; a name is who or what it is asked of."""
    found = _TOPIC.search(question.strip())
    if not found:
        return frozenset()
    subject = {stem(word) for word in _subject(question, found)}
    spelled = " ".join(_QUOTED.findall(question)) or question[: found.start()]
    for run in re.findall(r"(?:\b[A-Z][\w'-]*\s+)+[A-Z][\w'-]*", spelled):
        initials = "".join(word[0] for word in run.split()).casefold()
        for size in range(ACRONYM_MIN_WORDS, len(initials) + 1):
            subject.update(initials[start : start + size] for start in range(len(initials) - size + 1))
    # "post-SVB" names SVB too.
    return frozenset(content_stems(" ".join(names(found.group(1).replace("-", " "))))) & subject


def aspects(question: str) -> list[tuple[str, str]]:
    """(sub-question, query) for each aspect a question asks about: "what do the sources report about the
    strike and its effects on trade?" -> the strike; its effects on trade. Each query is the aspect's
    words and the question's subject (its quoted title or its names). Empty when the question names no
    topic after "about" (or "regarding", ...): the rules' plan then reads it."""
    found = _TOPIC.search(question.strip())
    if not found:
        return []
    focus = found.group(1)
    subject = _subject(question, found)
    parts = [part.strip() for part in re.split(r",|\band\b|\bas well as\b", focus) if content_words(part)]
    chosen = []
    for part in parts:
        own = content_words(part)
        rest = [word for word in dict.fromkeys(subject) if word not in own][:SUBJECT_QUERY_WORDS]
        chosen.append((f"{_ASPECT_PREFIX}{part}?", " ".join([*own, *rest])))
    return chosen


# The follow-up round asks about each aspect again with this many of the words its claims name most.
EXPANSION_TERMS = 6
# ... words that at least this many pages' claims about the aspect name (one page's pet word is no lead).
EXPANSION_MIN_PAGES = 3
_FOLLOW_UP_PREFIX = "What else do the sources report about "


def expansion_terms(
    aspect: str, question: str, claims: list[Claim], limit: int = EXPANSION_TERMS
) -> list[str]:
    """The words the verified claims about an aspect name far more often than the other claims do
    (relevance feedback, as in RM3): for "engine design", the parts the pages say were changed. A word is
    ranked by its contribution to the divergence of the aspect's claims from all the claims (p log p/q);
    numbers, the question's own words and words of fewer than EXPANSION_MIN_PAGES pages are left out.
    Each word is given as the claims most often spell it."""
    own = frozenset(content_stems(aspect)) - _ASKING
    spelled = [(claim.page_id, content_words(claim.quote)) for claim in claims]
    bags = [(page, frozenset(stem(word) for word in words)) for page, words in spelled]
    about = [(page, bag) for page, bag in bags if bag & own]
    if not own or not about:
        return []
    everywhere = Counter(term for _, bag in bags for term in bag)
    near = Counter(term for _, bag in about for term in bag)
    pages: dict[str, set[str]] = {}
    for page, bag in about:
        for term in bag:
            pages.setdefault(term, set()).add(page)
    asked = frozenset(content_stems(question)) | own | _ASKING

    def divergence(term: str) -> float:
        inside, overall = near[term] / len(about), everywhere[term] / len(bags)
        return inside * math.log(inside / overall)

    scored = {
        term: divergence(term)
        for term in near
        if term not in asked and not term[0].isdigit() and len(pages[term]) >= EXPANSION_MIN_PAGES
    }
    ranked = [
        term for term, score in sorted(scored.items(), key=lambda pair: (-pair[1], pair[0])) if score > 0
    ]
    forms = Counter(word.casefold() for _, words in spelled for word in words)
    shown = {}
    for word, _ in forms.most_common():
        shown.setdefault(stem(word), word)
    return [shown.get(term, term) for term in ranked[:limit]]


def follow_ups(evidence: SynthesisInput) -> list[tuple[str, str]]:
    """(sub-question, query) for each aspect of the question, asked again with the words its first-round
    claims name most (`expansion_terms`): the pages read once for the aspect's own words are read again
    for what they say about it in other words. Every aspect, also one the plan asked as the question
    itself (a question about one aspect has no sub-question of its own for it, the question's search
    being the aspect's): on summhay-dev, the two such questions read 20 pages each in one round and
    covered 2.5 and 3 of their 10 and 7 key facts; asked again, 4 and 4."""
    verified = [claim for claim in evidence.claims if claim.status is ClaimStatus.verified]
    found = []
    for text, _ in aspects(evidence.question):
        aspect = text.removeprefix(_ASPECT_PREFIX).rstrip("?")
        terms = expansion_terms(aspect, evidence.question, verified)
        if terms:
            own = content_words(aspect)
            found.append((f"{_FOLLOW_UP_PREFIX}{aspect}: {', '.join(terms)}?", " ".join([*own, *terms])))
    return found


def follow_up_terms(subquestions: list[SubQuestion]) -> frozenset[str]:
    """The words the follow-up round asked about (`follow_ups`): claims naming them are on an aspect."""
    return (
        frozenset(
            stem
            for sub in subquestions
            if sub.text.startswith(_FOLLOW_UP_PREFIX)
            for stem in content_stems(sub.text.removeprefix(_FOLLOW_UP_PREFIX))
        )
        - _ASKING
    )
