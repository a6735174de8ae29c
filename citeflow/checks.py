"""The critic's mechanical checks: each report sentence is judged against the claims it cites.

These run before any model critic and decide alone for the extractive engine. A sentence that fails
is never shipped: the final revision removes it and counts it. Before the checks, a sentence's
citations that support nothing in it are dropped (`prune_citations`), so a sentence citing five
sources, one about someone else, ships citing four.
"""

from __future__ import annotations

import re
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
from citeflow.text import content_stems, content_words, names, numbers
from citeflow.verify import content_support, negation_conflict, unsupported_details

# A sentence with this many content words states something; fewer is a heading or a connective.
FACTUAL_MIN_CONTENT_WORDS = 3
# A cited sentence may reword its claims, but not drift from them: beyond this share it is unsupported.
ABSENT_CONTENT_MAX_SHARE = 0.5
# A citation that only repeats words other citations of the sentence cover, and covers less than this
# share of the sentence, supports nothing of its own ("American" of an actor cited beside two directors).
CITATION_MIN_OWN_SHARE = 0.5


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
    # A verified claim's text holds only names and numbers of its quote (or its page's title), so what
    # its text says counts as said.
    said = "\n".join(f"{claim.text}\n{claim.quote}" for claim in cited)
    missing = unsupported_details(sentence.text, said)
    if missing:
        return SentenceCheck.unsupported, f"not in the cited claims: {', '.join(missing)}"
    share, absent = content_support(sentence.text, said)
    if share < 1 - ABSENT_CONTENT_MAX_SHARE:
        return (
            SentenceCheck.unsupported,
            f"most content words are not in the cited claims: {', '.join(absent)}",
        )
    conflict = negation_conflict(sentence.text, [claim.quote for claim in cited])
    if conflict:
        return SentenceCheck.unsupported, conflict.replace("its quote states", "its cited quotes state")
    return SentenceCheck.ok, ""


def claims_by_source(claims: list[Claim]) -> dict[str, list[Claim]]:
    """Verified claims grouped by the source id a report cites them by."""
    grouped: dict[str, list[Claim]] = defaultdict(list)
    for claim in claims:
        if claim.status is ClaimStatus.verified and claim.source_id:
            grouped[claim.source_id].append(claim)
    return dict(grouped)


def _covered(sentence: str, claims: list[Claim]) -> set[str]:
    """The sentence's content stems (names and numbers included) that the claims state."""
    said = set(content_stems("\n".join(f"{claim.text}\n{claim.quote}" for claim in claims)))
    return set(content_stems(sentence)) & said


def supporting_cites(sentence: DraftSentence, claims_by_source: dict[str, list[Claim]]) -> list[str]:
    """The sentence's citations minus those that support nothing in it: a citation whose claims share
    no content word with the sentence; or one that shares only words its other citations cover, and
    either covers less than CITATION_MIN_OWN_SHARE of the sentence or none of the names it states that
    the others do ("Nolan is a film director" citing a page about another director). An id that names
    no verified claim's source is kept, for `classify` to report; duplicates are dropped."""
    cites = list(dict.fromkeys(sentence.cites))
    own = set(content_stems(sentence.text))
    evidence = [claim.quote for source in claims_by_source.values() for claim in source]
    named = {stemmed for name in _stated_names(sentence.text, evidence) for stemmed in content_stems(name)}
    covers = {
        cite: _covered(sentence.text, claims_by_source[cite]) for cite in cites if cite in claims_by_source
    }
    kept = list(cites)
    for cite in sorted(covers, key=lambda cite: len(covers[cite])):  # the weakest first
        others = set().union(*(covers[other] for other in kept if other != cite and other in covers))
        weak = not own or len(covers[cite]) < CITATION_MIN_OWN_SHARE * len(own)
        about_another = bool(named & others) and not named & covers[cite]
        if not covers[cite] or (covers[cite] <= others and (weak or about_another)):
            kept.remove(cite)
    return kept


def _stated_names(text: str, evidence: list[str]) -> list[str]:
    """The names a sentence states. Its first word is capitalised by grammar ("Scientists estimate ..."),
    so it counts as a name only where the evidence also capitalises it inside a sentence."""
    found = names(text)
    first = text.split()[0] if text.split() else ""
    if found and first.startswith(found[0]) and not any(_named_inside(found[0], quote) for quote in evidence):
        return found[1:]
    return found


def _named_inside(word: str, text: str) -> bool:
    """Whether `text` has `word`, capitalised as given, after the first word of one of its sentences."""
    for match in re.finditer(rf"\b{re.escape(word)}\b", text):
        before = text[: match.start()].rstrip()
        if before and before[-1] not in ".!?:\"'(":
            return True
    return False


def prune_citations(draft: Draft, claims: list[Claim]) -> tuple[Draft, int]:
    """The draft with each sentence citing only what supports it, and how many citations were dropped."""
    grouped = claims_by_source(claims)
    sentences = []
    dropped = 0
    for sentence in draft.sentences:
        kept = supporting_cites(sentence, grouped) if sentence.cites else []
        dropped += len(sentence.cites) - len(kept)
        sentences.append(sentence.model_copy(update={"cites": kept}))
    return Draft(sentences=sentences), dropped


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
