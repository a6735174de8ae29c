"""Text normalisation, sentence splitting and word tokens: the shared ground of every mechanical check.

A quote is compared with a page only after both went through `normalise`, so that typography (curly
quotes, dashes, odd spaces, ligatures) never decides whether a quote is "found". `normalise_with_map`
keeps, for every normalised character, where it came from, so offsets can be stored against the
ORIGINAL page text and a verified quote is always a verbatim substring of the stored page.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import NamedTuple

# Typography that must not decide a match: each maps to its plain ASCII spelling.
_TYPOGRAPHY = str.maketrans(
    {
        **dict.fromkeys("‘’‚‛′`", "'"),
        **dict.fromkeys("“”„‟«»″", '"'),
        **dict.fromkeys("‐‑‒–—―−", "-"),
    }
)
# Invisible characters that only affect rendering (zero-width spaces/joiners, soft hyphen, BOM).
_INVISIBLE = frozenset("\u200b\u200c\u200d\u2060\ufeff\u00ad")

_WORD = re.compile(r"\w+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_CAPITALISED = re.compile(r"\b[^\W\d_][\w'\-]*")

# A small English stopword list: function words carry no evidence, so they never count as content.
STOPWORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before being below
    between both but by can could did do does doing down during each either else etc ever few for from
    further had has have having he her here hers herself him himself his how however i if in into is it its
    itself just least less many may me might more most much must my myself neither no nor not now of off
    on once only or other our ours ourselves out over own per same she should since so some such than that
    the their theirs them themselves then there these they this those though through thus to too under
    until up upon very was we were what whatever when where whether which while who whom whose why will
    with within without would yet you your yours yourself yourselves s t d ll m re ve
    """.split()  # noqa: SIM905 - a word list reads best as prose
)


@dataclass(frozen=True)
class NormalisedText:
    """Normalised text plus, per character, the span [start, end) of the original it came from."""

    text: str
    starts: list[int]
    ends: list[int]

    def original_span(self, start: int, end: int) -> tuple[int, int]:
        """Map a non-empty span of the normalised text to the original text's span."""
        if not 0 <= start < end <= len(self.text):
            raise ValueError(f"span [{start}, {end}) is not inside the normalised text of {len(self.text)}")
        return self.starts[start], self.ends[end - 1]


class Span(NamedTuple):
    start: int
    end: int
    text: str


def _clusters(text: str) -> list[tuple[int, int]]:
    """Base characters with their combining marks, so NFKC can compose them (e + U+0301 -> é)."""
    bounds: list[tuple[int, int]] = []
    for index, char in enumerate(text):
        if bounds and unicodedata.combining(char):
            bounds[-1] = (bounds[-1][0], index + 1)
        else:
            bounds.append((index, index + 1))
    return bounds


def normalise_with_map(text: str) -> NormalisedText:
    """`normalise`, remembering where each normalised character came from in `text`."""
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    for start, end in _clusters(text):
        # Typography first ("″" would become two "′" under NFKC), and again for what NFKC produces.
        piece = unicodedata.normalize("NFKC", text[start:end].translate(_TYPOGRAPHY)).translate(_TYPOGRAPHY)
        for char in piece:
            if char in _INVISIBLE:
                continue
            if char.isspace():
                if not chars:  # leading white space is stripped
                    continue
                if chars[-1] == " ":  # a run of white space collapses onto its first character
                    ends[-1] = end
                    continue
                char = " "
            chars.append(char)
            starts.append(start)
            ends.append(end)
    if chars and chars[-1] == " ":
        chars.pop()
        starts.pop()
        ends.pop()
    return NormalisedText("".join(chars), starts, ends)


def normalise(text: str) -> str:
    """NFKC, ASCII quotes and dashes, every white space run as one space, stripped."""
    return normalise_with_map(text).text


# Abbreviations after which a full stop does not end a sentence (compared case-folded, without the stop).
_ABBREVIATIONS = frozenset(
    """
    mr mrs ms dr st jr sr prof gen col lt sgt capt cpt maj adm rev hon gov sen rep pres fr sr sra mt ft
    vs e.g i.e cf approx ed eds inc ltd co corp bros dept univ jan feb mar apr jun jul aug sep sept oct nov
    dec ave blvd rd al
    """.split()  # noqa: SIM905 - a word list reads best as prose
)
# These are abbreviations only before a number ("No. 5", "c. 1200"); elsewhere "no." ends a sentence.
_NUMBER_ABBREVIATIONS = frozenset(["no", "nos", "vol", "vols", "p", "pp", "fig", "c", "ca", "est", "op"])
_CLOSERS = "\"'”’)]»"
_OPENERS = "\"'“‘([«¿¡"
_TERMINATOR = re.compile(r"[.!?]+")


def _is_abbreviation(text: str, stop: int, following: int) -> bool:
    """Whether the full stop at `stop` closes an abbreviation, an initial or a dotted acronym.

    `following` is where the next word starts.
    """
    begin = stop
    while begin > 0 and not text[begin - 1].isspace() and text[begin - 1] not in _OPENERS:
        begin -= 1
    token = text[begin:stop]
    if not token:
        return False
    if len(token) == 1 and token.isalpha() and token.isupper():  # an initial: "J. R. R. Tolkien"
        return True
    if re.fullmatch(r"(?:[^\W\d_]\.)+[^\W\d_]", token):  # a dotted acronym: "U.S.", "e.g."
        return True
    if token.casefold() in _NUMBER_ABBREVIATIONS:
        return following < len(text) and text[following].isdigit()
    return token.casefold() in _ABBREVIATIONS


def _starts_sentence(text: str, index: int) -> bool:
    """Whether the text at `index` (after white space) can begin a new sentence."""
    while index < len(text) and text[index] in _OPENERS:
        index += 1
    return index < len(text) and (text[index].isupper() or text[index].isdigit())


def _boundaries(text: str) -> list[int]:
    """Offsets where one sentence ends and white space before the next begins."""
    cuts: list[int] = []
    for match in _TERMINATOR.finditer(text):
        end = match.end()
        while end < len(text) and text[end] in _CLOSERS:
            end += 1
        if end < len(text) and not text[end].isspace():
            continue  # "3.5", "example.com", "U.S.-based"
        after = end
        while after < len(text) and text[after].isspace():
            after += 1
        if after == len(text):
            continue
        if match.group() == "." and _is_abbreviation(text, match.start(), after):
            continue
        if _starts_sentence(text, after):
            cuts.append(end)
    # A line break ends a sentence unless the next line continues it in lower case or with inline code
    # (a wrapped line): headings and list items carry no full stop but are not part of the following
    # paragraph. A blank line always ends one: it ends the paragraph.
    for match in re.finditer(r"\n\s*", text):
        following = match.end()
        if following == len(text):
            continue
        inline_code = text[following] == "`" and not text.startswith("```", following)  # not a fence
        wrapped = text[following].islower() or inline_code
        if not wrapped or match.group().count("\n") > 1:
            cuts.append(match.start())
    return sorted(set(cuts))


def split_sentences(text: str) -> list[Span]:
    """Sentences of `text`, each a verbatim substring: text[span.start:span.end] == span.text."""
    spans: list[Span] = []
    begin = 0
    for cut in [*_boundaries(text), len(text)]:
        start, end = begin, cut
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if start < end:
            spans.append(Span(start, end, text[start:end]))
        begin = cut
    return spans


def words(text: str) -> list[str]:
    """Case-folded word tokens of the normalised text."""
    return [token.casefold() for token in _WORD.findall(normalise(text))]


def content_words(text: str) -> list[str]:
    """Word tokens minus stopwords: the words that carry what a sentence says."""
    return [word for word in words(text) if word not in STOPWORDS]


_SUFFIXES = ("ations", "ation", "ings", "ing", "edly", "ed", "ers", "er", "ies", "es", "s", "ly")
# "-es" is a suffix of its own only after a hiss ("boxes", "churches"); elsewhere only its "s" is
# ("games" -> "game"), and "-ies" was a "y" ("stories" -> "story").
_HISSES = ("s", "x", "z", "ch", "sh")
_STEM_CHARS = 5


def stem(word: str) -> str:
    """A crude stem for matching only: suffix stripped, then the first five letters.

    "featuring"/"features" -> "featu", "starred"/"star" -> "star", "games"/"game" -> "game",
    "stories"/"story" -> "story", and even the misspelt "sponsered" meets "sponsored". Never shown to
    anyone; used to rank sentences against a query.
    """
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "es" and not word[:-2].endswith(_HISSES):
                suffix = "s"
            word = word[: -len(suffix)] + ("y" if suffix == "ies" else "")
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz" and not word[-1].isdigit():
        word = word[:-1]  # "starr" (from "starred") -> "star"
    return word[:_STEM_CHARS]


def content_stems(text: str) -> list[str]:
    """`content_words`, stemmed."""
    return [stem(word) for word in content_words(text)]


def numbers(text: str) -> list[str]:
    """Numbers in the text, thousands separators removed: "1,000" -> "1000", "3.5" stays."""
    return [re.sub(r",(?=\d{3}\b)", "", number) for number in _NUMBER.findall(normalise(text))]


def names(text: str) -> list[str]:
    """Capitalised words that are not stopwords ("Nolan", "BBC"), case kept; initials are too short."""
    found = []
    for token in _CAPITALISED.findall(normalise(text)):
        token = token.strip("'-")
        if len(token) > 1 and token[0].isupper() and token.casefold() not in STOPWORDS:
            found.append(token)
    return found


# Markdown that is not prose: a heading, a table row, and the fence line that opens or closes code.
_HEADING_LINE = re.compile(r"^[ \t]{0,3}#{1,6}(?:[ \t]|$)")
_TABLE_LINE = re.compile(r"^[ \t]*\|")
_FENCE_LINE = re.compile(r"^[ \t]{0,3}(?:```|~~~)")
# List and block-quote markers lead a line but are not part of the sentence: "- ", "* ", "2. ", "> ".
_LINE_MARKER = re.compile(r"^(?:[-*+>]|\d{1,3}[.)])[ \t]+")
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_PARENTHESISED = re.compile(r"\([^()]*\)")
# A sentence that is more inline code than words lists identifiers; one that is mostly punctuation is
# markup or a fragment ("Q).", "1243 )."); one of so few words outside code says nothing on its own.
PROSE_MAX_CODE_SHARE = 0.5
PROSE_MIN_ALNUM_SHARE = 0.6
PROSE_MIN_WORDS = 4


def _non_prose_ranges(text: str) -> list[tuple[int, int]]:
    """[start, end) ranges of `text` on Markdown heading or table lines, or inside code fences."""
    ranges: list[tuple[int, int]] = []
    fence_start: int | None = None
    for line in re.finditer(r"[^\n]*\n?", text):
        if not line.group():
            break
        if _FENCE_LINE.match(line.group()):
            if fence_start is None:
                fence_start = line.start()
            else:
                ranges.append((fence_start, line.end()))
                fence_start = None
        elif fence_start is None and (_HEADING_LINE.match(line.group()) or _TABLE_LINE.match(line.group())):
            ranges.append((line.start(), line.end()))
    if fence_start is not None:  # an unclosed fence runs to the end, as Markdown renders it
        ranges.append((fence_start, len(text)))
    return ranges


def _without_marker(span: Span) -> Span:
    """The span minus a leading list or block-quote marker: still a verbatim substring of the page."""
    marker = _LINE_MARKER.match(span.text)
    if not marker:
        return span
    return Span(span.start + marker.end(), span.end, span.text[marker.end() :])


def reads_as_prose(sentence: str) -> bool:
    """Whether a sentence is words rather than code, a list of `identifiers`, markup or a fragment.

    Words inside inline code do not count, nor, in a sentence with inline code, the parenthesised
    glosses of it: "`reason` (why it was rejected), `source_id` (its source)." lists fields, it says
    nothing. A sentence ending in a colon introduces what follows it, which is not in the quote.
    """
    visible = sum(not char.isspace() for char in sentence)
    outside_code = _INLINE_CODE.sub(" ", sentence)
    prose = [char for char in outside_code if not char.isspace()]
    alnum = sum(char.isalnum() for char in prose)
    if outside_code != sentence:
        outside_code = _PARENTHESISED.sub(" ", outside_code)
    return (
        not sentence.endswith(":")
        and visible - len(prose) <= PROSE_MAX_CODE_SHARE * visible
        and alnum >= PROSE_MIN_ALNUM_SHARE * len(prose)
        and len(words(outside_code)) >= PROSE_MIN_WORDS
    )


def prose_sentences(text: str, min_chars: int = 1) -> list[Span]:
    """The sentences of `text` that read as prose, each a verbatim substring of `text`.

    Ingested Markdown keeps its syntax, and a heading, a code line or a table row is no claim: sentences
    on heading or table lines or inside code fences are left out, list markers are trimmed off the
    front, and what is left must read as prose and be at least `min_chars` long once normalised.
    """
    skipped = _non_prose_ranges(text)
    kept = []
    for span in split_sentences(text):
        if any(start < span.end and span.start < end for start, end in skipped):
            continue
        span = _without_marker(span)
        if len(normalise(span.text)) >= min_chars and reads_as_prose(span.text):
            kept.append(span)
    return kept
