"""The extractive engine: every role played by deterministic rules, with no model.

It is a real product mode (offline, or when no model endpoint is configured), not a test double:
the planner splits the question by rules, the extractor quotes the page's own sentences, the
synthesiser writes only those quotes, and the critic is the mechanical checks.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from citeflow.checks import mechanical_critique
from citeflow.config import Caps
from citeflow.contracts import (
    ClaimDraft,
    ClaimStatus,
    Critique,
    Draft,
    DraftSentence,
    Page,
    SubQuestion,
    SynthesisInput,
)
from citeflow.roles import Engine
from citeflow.text import STOPWORDS, content_stems, content_words, normalise, prose_sentences

# Sub-question queries whose content words overlap this much (Jaccard) repeat each other.
QUERY_OVERLAP_DUPLICATE = 0.9
# Report sentences sharing at least this share of content words (of the shorter) repeat each other.
SENTENCE_OVERLAP_DUPLICATE = 0.8
# The question's words beyond its names make a sub-question of their own from this many on.
REMAINDER_MIN_WORDS = 2
# Facets fill a plan only for a question with this many distinct content words: fewer make no
# searches that differ from the question's own.
FACET_MIN_TERMS = 3
# The subject of "How does X ...?" has at most this many words: in a longer run of content words
# ("How does the evidence store keep old pages?") the verb is somewhere inside it.
SUBJECT_MAX_WORDS = 3
# Quotes shorter than this prove nothing (the verifier's default minimum).
FRAGMENT_MIN_CHARS = 20
# A page sharing fewer of the query's stems than this (or than the query has) was found on a stray
# word: it is not about the sub-question (on hotpotqa-100, citation precision 0.204 -> 0.244 with
# evidence recall unchanged).
PAGE_MIN_SHARED_STEMS = 2
# A page's first sentence usually defines its subject: a small bonus, as a share of the best score.
FIRST_SENTENCE_BONUS = 0.25

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
# Capitalised words that start a question or an instruction but never a name.
_NOT_NAMES = (
    frozenset(["name", "list", "describe", "explain", "tell", "give", "notable", "besides"]) | STOPWORDS
)
# Nationality adjectives ("Indian film photographer") name no page of their own.
_DEMONYM = re.compile(
    r"(?:ian|ish|ese|ean|can|ern)$|^(?:english|french|dutch|welsh|german|greek|thai|swiss)$"
)
_INITIALS = re.compile(r"(?:[^\W\d_]\.)+")
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})s?\b")
_QUOTED = re.compile(r'"([^"]{2,}?)"')
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
_AGE = re.compile(r"\b(older|oldest|younger|youngest|born first|born earlier)\b", re.IGNORECASE)
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


def _tokens(text: str) -> list[_Token]:
    tokens = []
    for raw in text.split():
        stripped = raw.strip("\"'()[]{},;:?!")
        initial = bool(_INITIALS.fullmatch(stripped))  # "E.", "D.P.": the stop is part of the name
        if stripped.endswith(".") and not initial:
            stripped = stripped[:-1]
        ends = raw[-1] in ',;:?!()"' or (raw.endswith(".") and not initial)
        tokens.append(_Token(stripped, ends))
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


def name_spans(text: str) -> list[str]:
    """Capitalised multi-word spans and single names ("Christopher Nolan", "Haymo of Faversham")."""
    spans: list[list[str]] = []
    current: list[str] = []
    tokens = _tokens(text)
    for index, token in enumerate(tokens):
        word = token.text
        if _is_capitalised(word) and not (not current and word.casefold() in _NOT_NAMES):
            current.append(word)
        elif current and word[:1].isdigit():
            current.append(word)  # "Big Hero 6", "BWV 1033"
        elif current and word.casefold() in _NAME_CONNECTORS and _continues_name(tokens, index):
            current.append(word)
            continue
        else:
            if current:
                spans.append(current)
            current = []
            continue
        if token.ends_span:
            spans.append(current)
            current = []
    if current:
        spans.append(current)
    names = []
    for span in spans:
        while span and (span[-1].casefold() in _NAME_CONNECTORS or span[-1].casefold() in STOPWORDS):
            span = span[:-1]
        if len(span) == 1 and (len(span[0]) < 2 or _DEMONYM.search(span[0].casefold())):
            continue
        if span:
            names.append(" ".join(span))
    return names


def _key(text: str) -> str:
    return " ".join(content_words(text))


def _jaccard(first: list[str], second: list[str]) -> float:
    a, b = set(first), set(second)
    return len(a & b) / len(a | b) if a | b else 0.0


def _overlap(first: list[str], second: list[str]) -> float:
    """Shared content words as a share of the smaller set (1.0 when one contains the other)."""
    a, b = set(first), set(second)
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


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
class _Side:
    name: str
    text: str
    extra: str  # words the side's query needs beyond its name ("born" for an age comparison)


def _strip_article(text: str) -> str:
    return re.sub(r"^(the|a|an)\s+", "", text.strip(" ,"), flags=re.IGNORECASE)


def _pair_sides(question: str) -> list[_Side]:
    """ "Are A and B both X?" and "Are both N, A and B, X?" -> "Is A X?", "Is B X?"."""
    match = _PAIR.match(question)
    if not match:
        return []
    aux, both, before, after = match.groups()
    first = before.rsplit(",", 1)[1] if both and "," in before else before
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
        _Side(name, f"{verb} {name} {_singular_phrase(predicate)}?", predicate) for name in (first, second)
    ]


def _side_text(name: str, stem: str, question: str) -> tuple[str, str]:
    """A readable sub-question for one side of "Which ..., A or B?", and its extra query words."""
    if _AGE.search(stem):
        return f"When was {name} born?", "born"
    event = _EVENT.search(stem)
    if _FIRST.search(stem) and event:
        return f"When was {name} {event.group()}?", event.group()
    return f"Regarding {name}: {question}", stem


def _choice_sides(question: str) -> list[_Side]:
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
    return [_Side(name, *_side_text(name, stem, question)) for name in names]


def question_entities(question: str) -> list[str]:
    """Entities to search for, best first: quoted titles and multi-word names, single names, years."""
    text = normalise(question)
    quoted = [title.strip() for title in _QUOTED.findall(text)]
    rest = _QUOTED.sub(" , ", text)
    names = name_spans(rest)
    multi = [name for name in names if len(name.split()) > 1]
    single = [name for name in names if len(name.split()) == 1 and not _YEAR.fullmatch(name)]
    years = [match.group(1) for match in _YEAR.finditer(text)]
    ordered = sorted(quoted + multi, key=text.find) + single + years
    return list(dict.fromkeys(ordered))


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


@dataclass(frozen=True)
class _Phrase:
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


def key_phrases(question: str) -> list[_Phrase]:
    """The question's key terms beyond its names, in order: the noun phrases after an article or a
    preposition, and the subject of "How/Why/What does X ...?". Rule-based, so rough; each phrase
    only has to make a search of its own."""
    text = normalise(question)
    for entity in sorted(question_entities(text), key=len, reverse=True):
        text = text.replace(entity, " , ")  # names are searched for already; a comma ends a phrase
    tokens = _PHRASE_TOKEN.findall(text)
    lowered = [token.casefold() for token in tokens]
    mechanism = len(lowered) > 2 and lowered[0] in _MECHANISM_OPENERS and lowered[1] in _DO_AUXILIARIES
    phrases: list[_Phrase] = []
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
        phrases.append(_Phrase(tuple(run), shown, subject))
    return phrases


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
        facets.append((f"What does the evidence say about {phrase.shown}?", query))
    return facets


@dataclass(frozen=True)
class ExtractivePlanner:
    """Sub-questions by rules: the question itself, one per side of a comparison, one per entity, and
    one for what the question asks beyond its names (often the page that links two entities). A plan
    still short of `min_subquestions` is filled with facets: the question's subject and key phrases."""

    min_subquestions: int = Caps().subquestions_min

    def plan(self, question: str, max_subquestions: int) -> list[SubQuestion]:
        question = normalise(question)
        sides = _pair_sides(question) or _choice_sides(question)
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
            (f"What does the evidence say about {name}?", _query_for(name, "", topic, others(name)))
            for name in entities
        ]
        named = {word for name in mentioned for word in content_words(name)}
        remainder = [word for word in dict.fromkeys(topic) if word not in named]
        if mentioned and len(remainder) >= REMAINDER_MIN_WORDS:
            terms = " ".join(remainder)
            candidates.append(
                (f"What does the evidence say about the other terms of the question ({terms})?", terms)
            )
        chosen = _distinct(candidates, max_subquestions)
        target = min(self.min_subquestions, max_subquestions)
        if len(chosen) < target and len(set(topic)) >= FACET_MIN_TERMS:
            chosen = _distinct(candidates + _facets(question, topic), target)
        return [
            SubQuestion(id=f"q{position + 1}", position=position, text=text, query=query)
            for position, (text, query) in enumerate(chosen)
        ]


class ExtractiveExtractor:
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
        if len(query.intersection(set().union(*bags))) < min(PAGE_MIN_SHARED_STEMS, len(query)):
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


class ExtractiveSynthesiser:
    """A section per sub-question, one sentence per verified claim: the claim's own words, cited."""

    def write(self, request: SynthesisInput) -> Draft:
        if request.previous is not None and request.critique is not None and request.critique.problems:
            flagged = {problem.index for problem in request.critique.problems}
            kept = [
                sentence for index, sentence in enumerate(request.previous.sentences) if index not in flagged
            ]
            return Draft(sentences=kept)
        written: list[list[str]] = []
        sentences = []
        for subquestion in request.subquestions:
            for claim in request.claims:
                if (
                    claim.subquestion_id != subquestion.id
                    or claim.status is not ClaimStatus.verified
                    or not claim.source_id
                ):
                    continue
                words = content_words(claim.text)
                if not words or any(_overlap(words, seen) >= SENTENCE_OVERLAP_DUPLICATE for seen in written):
                    continue
                written.append(words)
                sentences.append(
                    DraftSentence(text=claim.text, cites=[claim.source_id], section=subquestion.id)
                )
        return Draft(sentences=sentences)


class ExtractiveCritic:
    """The extractive critic is the mechanical checks, nothing more."""

    def review(self, request: SynthesisInput, draft: Draft) -> Critique:
        return mechanical_critique(draft, request.claims)


def extractive_engine(min_subquestions: int = Caps().subquestions_min) -> Engine:
    return Engine(
        name="extractive",
        planner=ExtractivePlanner(min_subquestions),
        extractor=ExtractiveExtractor(),
        synthesiser=ExtractiveSynthesiser(),
        critic=ExtractiveCritic(),
    )
