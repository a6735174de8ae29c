"""Ranking evidence for a question: a scored model with few weights.

A claim's score is the question's relation stems it shows, each weighted by its rarity among the
claims (a stem every claim shares tells them apart least), plus the stems next to the question word,
counted SLOT_WEIGHT times again by their nearness, discounted by how surely the claim's page is one the
question is about (ANCHOR_TRUST). Stems are compared through a small general synonym table, so that
"place of birth" meets "was born in" and "husband" meets "married". The weights were set on the first
half of hotpotqa-100 and checked on its second half.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum

from citeflow.text import content_stems

# The words next to the question word count this many times more in the claim that answers.
SLOT_WEIGHT = 2.0

# Stems that say the same relation in other words: general English, not one dataset's phrasing. Each
# group is read as its first stem (stems are content_stems' five-letter prefixes).
_SYNONYM_GROUPS = (
    ("born", "birth", "birthplace"),
    ("died", "death", "dies", "die"),
    ("married", "husband", "wife", "spouse", "widow"),
    ("performer", "performed", "singer", "sung", "sang", "recorded", "artist"),
    ("director", "directed"),
    ("nationality", "citizen", "national"),
    ("founder", "founded", "established", "formed"),
    ("author", "wrote", "written", "writer"),
    ("parent", "father", "mother", "paternal", "maternal"),
    ("child", "son", "daughter", "children"),
    ("grandfather", "grandson", "granddaughter", "grandchild", "grandparent"),
)


def _canonical_table() -> dict[str, str]:
    table: dict[str, str] = {}
    for group in _SYNONYM_GROUPS:
        stems = [stem for word in group for stem in content_stems(word)]
        for stem in stems:
            table.setdefault(stem, stems[0])
    return table


_CANONICAL = _canonical_table()


def relation_stems(text: str) -> frozenset[str]:
    """The text's content stems, each synonym group read as one stem."""
    return frozenset(_CANONICAL.get(stem, stem) for stem in content_stems(text))


def canonical(stem: str) -> str:
    return _CANONICAL.get(stem, stem)


[_PARENT], [_CHILD], [_GRAND] = (
    relation_stems("parent"),
    relation_stems("child"),
    relation_stems("grandfather"),
)


def chain_stems(links: list[frozenset[str]]) -> frozenset[str]:
    """What a chain of claims shows together: each claim's stems, and a relation composed of two: a
    parent's parent is a grandparent ("the son of Hugh", then Hugh "the son of Alder"), whichever way
    each link states the kinship."""
    shown = frozenset().union(*links) if links else frozenset()
    if sum(bool({_PARENT, _CHILD} & stems) for stems in links) >= 2:
        shown |= {_GRAND}
    return shown


class Anchor(IntEnum):
    """How surely a page is one the question is about; a chain starts on an anchor page."""

    none = 0
    described = 1  # a claim on it shows much of what the question says: "the runner-up in the 1999 ..."
    titled = 2  # its title contains one of the question's names, or is contained in one
    named = 3  # the question names everything its title names


# How far a chain from each kind of anchor page is trusted. A chain from a page the question names is
# taken at its word; one from a page the question only describes must show nearly all of the question
# to pass, since with the right pages missing a page of the same description still matches it.
ANCHOR_TRUST = {Anchor.none: 0.0, Anchor.described: 0.25, Anchor.titled: 0.33, Anchor.named: 1.0}


@dataclass
class Weights:
    """How much each relation stem counts: a stem most claims share ("film") tells chains apart less.
    Stems next to the question word count again in an answering claim, by their nearness."""

    relation: frozenset[str]
    slot: dict[str, float] = field(default_factory=dict)
    weight: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(
        cls, relation: frozenset[str], bags: list[frozenset[str]], slot: tuple[tuple[str, float], ...] = ()
    ) -> Weights:
        """Weights of the relation and slot stems among `bags`, the claims' stems."""
        total = max(len(bags), 1)
        near = dict(slot)
        weight = {}
        for stem in relation | set(near):
            count = sum(stem in bag for bag in bags)
            weight[stem] = math.log(1 + total / (1 + count)) + 0.1
        return cls(relation, near, weight)

    def cover(self, stems: Iterable[str]) -> float:
        return sum(self.weight[stem] for stem in set(stems) & self.relation)

    def slot_cover(self, stems: Iterable[str]) -> float:
        return sum(self.weight[stem] * self.slot[stem] for stem in set(stems) & set(self.slot))

    def score(self, stems: Iterable[str]) -> float:
        """One claim's score before its anchor's trust: relation shown, and the slot again."""
        bag = set(stems)
        return self.cover(bag) + SLOT_WEIGHT * self.slot_cover(bag)

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


def chain_score(cover: float, answer_stems: Iterable[str], anchor: Anchor, weights: Weights) -> float:
    """How well a chain answers: the relation it shows (`cover`), its answering claim's words next to
    the question word, discounted by how surely its anchor is what the question is about."""
    return (cover + SLOT_WEIGHT * weights.slot_cover(answer_stems)) * ANCHOR_TRUST[anchor]
