"""The critic's mechanical checks: each report sentence is judged against the claims it cites.

These run before any model critic and decide alone for the extractive engine. A sentence that fails
is never shipped: the final revision removes it and counts it.
"""

from __future__ import annotations

from collections import defaultdict

from citeflow.contracts import (
    Claim,
    ClaimStatus,
    Critique,
    Draft,
    DraftSentence,
    SentenceCheck,
    SentenceProblem,
)
from citeflow.text import content_words, numbers
from citeflow.verify import unsupported_details

# A sentence with this many content words states something; fewer is a heading or a connective.
FACTUAL_MIN_CONTENT_WORDS = 3
# A cited sentence may reword its claims, but not drift from them: beyond this share it is unsupported.
ABSENT_CONTENT_MAX_SHARE = 0.5


def is_factual(text: str) -> bool:
    """Whether a sentence asserts something that needs a citation.

    Any number counts, and so does a capitalised name after the first word (the first word is
    capitalised by grammar, and headings such as "Background" are one capitalised word).
    """
    if numbers(text) or len(content_words(text)) >= FACTUAL_MIN_CONTENT_WORDS:
        return True
    tokens = text.split()
    return any(token[:1].isupper() and content_words(token) for token in tokens[1:])


def classify(sentence: DraftSentence, claims_by_source: dict[str, list[Claim]]) -> tuple[SentenceCheck, str]:
    """The mechanical verdict on one sentence, and a detail naming the id or word at fault."""
    if not sentence.cites:
        if is_factual(sentence.text):
            return SentenceCheck.uncited, "a factual sentence cites no source"
        return SentenceCheck.ok, ""
    unknown = [cite for cite in sentence.cites if cite not in claims_by_source]
    if unknown:
        return SentenceCheck.unknown_id, f"cites {', '.join(unknown)}, not the source of a verified claim"
    cited = [claim for cite in sentence.cites for claim in claims_by_source[cite]]
    quotes = "\n".join(claim.quote for claim in cited)
    missing = unsupported_details(sentence.text, quotes)
    if missing:
        return SentenceCheck.unsupported, f"not in the cited quotes: {', '.join(missing)}"
    said = set(content_words("\n".join(f"{claim.text}\n{claim.quote}" for claim in cited)))
    own = list(dict.fromkeys(content_words(sentence.text)))
    absent = [word for word in own if word not in said]
    if own and len(absent) / len(own) > ABSENT_CONTENT_MAX_SHARE:
        return (
            SentenceCheck.unsupported,
            f"most content words are not in the cited claims: {', '.join(absent)}",
        )
    return SentenceCheck.ok, ""


def claims_by_source(claims: list[Claim]) -> dict[str, list[Claim]]:
    """Verified claims grouped by the source id a report cites them by."""
    grouped: dict[str, list[Claim]] = defaultdict(list)
    for claim in claims:
        if claim.status is ClaimStatus.verified and claim.source_id:
            grouped[claim.source_id].append(claim)
    return dict(grouped)


def mechanical_critique(draft: Draft, claims: list[Claim]) -> Critique:
    """Approve the draft iff it has sentences and every one passes `classify`."""
    grouped = claims_by_source(claims)
    problems = []
    for index, sentence in enumerate(draft.sentences):
        check, detail = classify(sentence, grouped)
        if check is not SentenceCheck.ok:
            problems.append(SentenceProblem(index=index, check=check, detail=detail))
    if not draft.sentences:
        return Critique(approved=False, notes="the draft has no sentences")
    total = len(draft.sentences)
    notes = (
        f"{len(problems)} of {total} sentences failed the mechanical checks"
        if problems
        else f"all {total} sentences pass the mechanical checks"
    )
    return Critique(approved=not problems, notes=notes, problems=problems)


def failing_sentences(draft: Draft, critique: Critique) -> dict[int, str]:
    """Position in the draft -> why that sentence is removed (its first problem in the critique)."""
    reasons: dict[int, str] = {}
    for problem in critique.problems:
        if not 0 <= problem.index < len(draft.sentences):
            continue  # a critic's index past the draft names no sentence
        reason = f"{problem.check.value}: {problem.detail}" if problem.detail else problem.check.value
        reasons.setdefault(problem.index, reason)
    return reasons
