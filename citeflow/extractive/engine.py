"""The extractive engine: every role played by deterministic rules, with no model.

It is a real product mode (offline, or when no model endpoint is configured), not a test double:
the planner splits the question by rules (citeflow/extractive/question.py) and follows up the entities the
verified claims name, the verifier quotes the page's own sentences, the synthesiser writes the quote
that answers first and then those that support it (citeflow/extractive/answer.py), and the critic is the
mechanical checks.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from citeflow.checks import mechanical_critique
from citeflow.config import Caps
from citeflow.contracts import (
    ClaimDraft,
    Critique,
    Draft,
    Page,
    SubQuestion,
    SynthesisInput,
)
from citeflow.extractive.answer import Answerer, bridges, gather, names_title
from citeflow.extractive.digest import aspects, digest, follow_ups
from citeflow.extractive.kind import ReportKind, report_kind
from citeflow.extractive.question import key_phrases, question_entities, question_sides, read_question
from citeflow.roles import Engine
from citeflow.text import content_stems, content_words, normalise, prose_sentences

# Sub-question queries whose content words overlap this much (Jaccard) repeat each other.
QUERY_OVERLAP_DUPLICATE = 0.9
# Report sentences sharing at least this share of content words (of the shorter) repeat each other.
SENTENCE_OVERLAP_DUPLICATE = 0.8
# Facets fill a plan only for a question with this many distinct content words: fewer make no
# searches that differ from the question's own.
FACET_MIN_TERMS = 3
# Quotes shorter than this prove nothing (the verifier's default minimum).
FRAGMENT_MIN_CHARS = 20
# A page sharing fewer of the query's stems than this (or than the query has) was found on a stray
# word: it is not about the sub-question (on hotpotqa-100, citation precision 0.204 -> 0.244 with
# evidence recall unchanged).
PAGE_MIN_SHARED_STEMS = 2
# A page's first sentence usually defines its subject: a small bonus, as a share of the best score.
FIRST_SENTENCE_BONUS = 0.25


def _jaccard(first: list[str], second: list[str]) -> float:
    a, b = set(first), set(second)
    return len(a & b) / len(a | b) if a | b else 0.0


def _overlap(first: list[str], second: list[str]) -> float:
    """Shared content words as a share of the smaller set (1.0 when one contains the other)."""
    a, b = set(first), set(second)
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


def _query_for(name: str, extra: str, topic: list[str], others: set[str]) -> str:
    """The name, then the question's other content words minus those of the other names.

    Leaving the other names out makes each query pull towards its own entity's page.
    """
    own = set(content_words(name))
    rest = [word for word in dict.fromkeys(content_words(extra) + topic) if word not in own | others]
    return " ".join([name, *rest])


def _distinct(candidates: list[tuple[str, str]], limit: int) -> list[tuple[str, str]]:
    """The first `limit` (text, query) candidates whose queries do not repeat an earlier one."""
    chosen: list[tuple[str, str]] = []
    for text, query in candidates:
        words = content_words(query)
        if not words or any(
            _jaccard(words, content_words(kept)) >= QUERY_OVERLAP_DUPLICATE for _, kept in chosen
        ):
            continue
        chosen.append((text, query))
        if len(chosen) == limit:
            break
    return chosen


def _facets(question: str, topic: list[str]) -> list[tuple[str, str]]:
    """Further searches for a question that names few things: what its subject is ("How does X
    work?" -> "What is X?"), then what the evidence says about each of its key phrases.

    A phrase's query is the phrase and the question's other content words minus the other phrases,
    so each query pulls towards its own phrase. (Anchoring it on the question's names instead found
    more pages but fewer of the right ones on hotpotqa-100.)
    """
    phrases = key_phrases(question)
    facets = []
    for phrase in phrases:
        if phrase.subject:
            verb = "are" if re.search(r"[^su]s$", phrase.words[-1]) else "is"
            facets.append((f"What {verb} {phrase.shown}?", " ".join(phrase.words)))
            continue
        others = {word for other in phrases if other != phrase for word in other.words}
        query = " ".join(dict.fromkeys([*phrase.words, *(word for word in topic if word not in others)]))
        facets.append((f"What is known about {phrase.shown}?", query))
    return facets


@dataclass(frozen=True)
class ExtractivePlanner:
    """Sub-questions by rules: the question itself, one per side of a comparison and one per entity. A
    plan still short of `min_subquestions` is filled with facets: the question's subject and key phrases.
    The page that links two entities is the second round's to find (`follow_up`), from what the first
    round's verified claims name."""

    min_subquestions: int = Caps().subquestions_min

    def plan(self, question: str, max_subquestions: int) -> list[SubQuestion]:
        question = normalise(question)
        if report_kind(question) is ReportKind.digest and (parts := aspects(question)):
            # An open question about a topic: the question itself, then each aspect it names.
            words = " ".join(dict.fromkeys(word for _, query in parts for word in query.split()))
            chosen = _distinct([(question, words), *parts], max_subquestions)
            return [
                SubQuestion(id=f"q{position + 1}", position=position, text=text, query=query)
                for position, (text, query) in enumerate(chosen)
            ]
        sides = question_sides(question)
        side_words = [set(content_words(side.name)) for side in sides]
        # An entity inside a side ("Escape" of "Escape from the Dark") is that side already.
        entities = [
            name
            for name in question_entities(question)
            if not any(set(content_words(name)) <= words for words in side_words)
        ]
        mentioned = [side.name for side in sides] + entities
        topic = content_words(question)

        def others(name: str) -> set[str]:
            return {word for other in mentioned if other != name for word in content_words(other)}

        candidates = [(question, question)]
        candidates += [
            (side.text, _query_for(side.name, side.extra, topic, others(side.name))) for side in sides
        ]
        candidates += [
            (f"What is known about {name}?", _query_for(name, "", topic, others(name))) for name in entities
        ]
        chosen = _distinct(candidates, max_subquestions)
        target = min(self.min_subquestions, max_subquestions)
        if len(chosen) < target and len(set(topic)) >= FACET_MIN_TERMS:
            chosen = _distinct(candidates + _facets(question, topic), target)
        return [
            SubQuestion(id=f"q{position + 1}", position=position, text=text, query=query)
            for position, (text, query) in enumerate(chosen)
        ]

    def follow_up(self, evidence: SynthesisInput, limit: int) -> list[SubQuestion]:
        """Sub-questions about the bridge entities the verified claims name (answer.py): "born
        in Young, New South Wales" leads to Young when the question asks about the birthplace. For an
        open question, the aspects the first round found little about (digest.py)."""
        if report_kind(evidence.question) is ReportKind.digest:
            return [
                SubQuestion(id=f"f{n}", position=n, text=text, query=query)
                for n, (text, query) in enumerate(follow_ups(evidence)[: max(limit, 0)])
            ]
        shape = read_question(evidence.question)
        found = bridges(shape, gather(evidence), limit)
        return [
            SubQuestion(
                id=f"f{n}", position=n, text=f"What is known about {bridge.name}?", query=bridge.query
            )
            for n, bridge in enumerate(found)
        ]


class ExtractiveVerifier:
    """The page's own prose sentences that best match the sub-question, each quoted verbatim.

    Sentences are ranked by the stems they share with the sub-question's query, each weighted by its
    rarity within the page; the first sentence, which usually defines the page's subject, gets a
    small bonus; ties go to the earlier sentence. A page that shares fewer than two stems with the
    query (or lacks the one stem of a one-word query) gives nothing: search found it on a stray word.
    Otherwise the top `limit` are taken even when some share nothing: search judged the page
    relevant, and a short page's every sentence is usually about its subject. Markdown headings,
    code, table rows and fragments are never proposed (`prose_sentences`).
    """

    def extract(self, subquestion: SubQuestion, page: Page, limit: int) -> list[ClaimDraft]:
        sentences = [span.text for span in prose_sentences(page.text, FRAGMENT_MIN_CHARS)]
        bags = [set(content_stems(sentence)) for sentence in sentences]
        query = set(content_stems(subquestion.query))
        asked_for = names_title(subquestion.query, page.title)  # a follow-up about this page's subject
        if not asked_for and len(query.intersection(set().union(*bags))) < min(
            PAGE_MIN_SHARED_STEMS, len(query)
        ):
            return []
        frequency = {stem: sum(stem in bag for bag in bags) for stem in query}
        weight = {stem: math.log(1 + len(bags) / count) for stem, count in frequency.items() if count}
        scores = [sum(weight.get(stem, 0.0) for stem in bag & query) for bag in bags]
        if not scores or max(scores) <= 0:
            return []
        scores[0] += FIRST_SENTENCE_BONUS * max(scores)
        ranked = sorted(range(len(sentences)), key=lambda index: (-scores[index], index))
        return [
            ClaimDraft(text=sentences[index], quote=sentences[index]) for index in ranked[: max(limit, 0)]
        ]


@dataclass(frozen=True)
class ExtractiveSynthesiser:
    """For a one-fact question (kind.py), the answer first, then the few claims that support it
    (answer.py); when the claims do not answer the question, only the related ones, and no answer
    sentence. Every sentence is a verified claim's own words, or a verdict ("Yes: ...", "No: ...")
    citing the claims that decide it. For an open question, the digest of every distinct finding
    (digest.py), or the related claims when no claim is about the question's subject."""

    findings_max: int = Caps().report_findings_max
    words_max: int = Caps().report_words_max

    def write(self, request: SynthesisInput) -> Draft:
        if request.previous is not None and request.critique is not None and request.critique.problems:
            flagged = {problem.index for problem in request.critique.problems}
            kept = [
                sentence for index, sentence in enumerate(request.previous.sentences) if index not in flagged
            ]
            return Draft(sentences=kept)
        if report_kind(request.question) is ReportKind.digest:
            found = digest(request, self.findings_max, self.words_max).sentences()
            if found:
                return Draft(sentences=found)
        answer = Answerer(request, read_question(request.question)).answer()
        written: list[list[str]] = []
        sentences = []
        for sentence in [*answer.lead, *answer.support]:
            words = content_words(sentence.text)
            if any(_overlap(words, seen) >= SENTENCE_OVERLAP_DUPLICATE for seen in written):
                continue
            written.append(words)
            sentences.append(sentence)
        return Draft(sentences=sentences)


class ExtractiveCritic:
    """The extractive critic is the mechanical checks, nothing more."""

    def review(self, request: SynthesisInput, draft: Draft) -> Critique:
        return mechanical_critique(draft, request.claims)


def extractive_engine(
    min_subquestions: int = Caps().subquestions_min,
    findings_max: int = Caps().report_findings_max,
    words_max: int = Caps().report_words_max,
) -> Engine:
    return Engine(
        name="extractive",
        planner=ExtractivePlanner(min_subquestions),
        verifier=ExtractiveVerifier(),
        synthesiser=ExtractiveSynthesiser(findings_max, words_max),
        critic=ExtractiveCritic(),
    )
