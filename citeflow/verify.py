"""The mechanical check of claims: a claim is verified only if its quote is found in the stored page and
the claim says what the quote says.

No model takes part here. Quote and page are compared after `normalise`, and the offsets stored are
those of the ORIGINAL page text, so the stored quote is the page's own verbatim substring. A quote a
model copied nearly but not exactly (a wrapper tag pasted in, a pronoun swapped for the name it stands
for, spacing) is repaired to the one page span it matches, and the claim is checked against that span.
A claim may paraphrase its quote, within limits: every number and name in it must be in the quote (or,
for a name, the page title, which is what "it" and "he" on a page usually stand for), most of its
content words must be the quote's (stemmed), and it must not negate what the quote states or drop a
negation the quote makes.
"""

from __future__ import annotations

import math
import re
from difflib import SequenceMatcher

from citeflow.config import Caps
from citeflow.contracts import Claim, ClaimDraft, ClaimStatus, Page
from citeflow.text import (
    STOPWORDS,
    NormalisedText,
    content_stems,
    names,
    normalise,
    normalise_with_map,
    numbers,
    stem,
    words,
)

# Our own prompt wrapper around page text (citeflow/llm/prompts.py `untrusted`), which small models
# sometimes copy into a quote along with the text.
_WRAPPER_TAG = re.compile(r"</?untrusted-[0-9a-f]*(?:\s+label=\"[^\"]*\")?\s*>", re.IGNORECASE)
# A repair needs this many word tokens in the quote: a shorter near-match is too easily a different claim.
REPAIR_MIN_TOKENS = 6
# At most this many tokens of the quote may differ from the page span it is repaired to (a swapped
# pronoun is one), and the span's length may differ from the quote's by at most as many.
REPAIR_MAX_EDITS = 2
# Words that negate what follows them, and those that follow "not" without negating ("not only ... but").
NEGATIONS = frozenset("not no never none nobody nothing neither nor without cannot nowhere".split())  # noqa: SIM905
_NOT_NEGATING_NEXT = frozenset(["only", "just", "until", "least", "merely", "later"])
# A negation's scope ends at a clause's end or a conjunction, or after this many content words; not at
# a comma, which in "never sold anvils, rockets and magnets" lists what is negated.
_SCOPE_ENDS = frozenset(["but", "although", "though", "while", "whereas", "yet", "and", "or"])
# Words opening a condition: a negation in it ("if the bank does not raise capital") asserts nothing.
_CONDITIONS = frozenset(["if", "whether", "unless"])
NEGATION_SCOPE_WORDS = 4
# Capitalised words that open an answer ("Yes, Nolan is a film director.") and name nothing.
_ANSWER_WORDS = frozenset(["yes"])
# A number is one token ("3,300"): its comma ends no clause.
_NEGATION_TOKEN = re.compile(r"[a-z]+n't|\d[\d,.]*\d|\w+|[.,;:!?()\"]")


def _find_in(page: NormalisedText, quote: str) -> tuple[int, int] | None:
    needle = normalise(quote)
    if not needle:
        return None
    at = page.text.find(needle)
    if at < 0:
        return None
    return page.original_span(at, at + len(needle))


def find_quote(page_text: str, quote: str) -> tuple[int, int] | None:
    """Offsets [start, end) in the original `page_text` of `quote`, compared normalised; None if absent."""
    return _find_in(normalise_with_map(page_text), quote)


def _tokens_with_spans(text: str) -> list[tuple[str, int, int]]:
    return [(match.group().casefold(), match.start(), match.end()) for match in re.finditer(r"\w+", text)]


def _repair_in(page: NormalisedText, quote: str) -> tuple[int, int] | None:
    """The original span of the one page passage `quote` nearly copies, or None.

    Wrapper tags are removed first. Otherwise the quote's word tokens are aligned with each stretch of
    the page of about the same length that shares its first or last word; a stretch matches when at
    most REPAIR_MAX_EDITS tokens differ. Two different stretches matching equally well is no repair:
    the quote does not say which one it meant."""
    unwrapped = _WRAPPER_TAG.sub(" ", quote)
    if unwrapped != quote and (span := _find_in(page, unwrapped)):
        return span
    wanted = [token for token, _, _ in _tokens_with_spans(normalise(unwrapped))]
    if len(wanted) < REPAIR_MIN_TOKENS:
        return None
    tokens = _tokens_with_spans(page.text)
    words_only = [token for token, _, _ in tokens]
    wanted_set = set(wanted)
    best: tuple[int, int, int] | None = None  # (edits, start token, end token)
    tied = False
    anchors = {i for i, token in enumerate(words_only) if token == wanted[0]}
    anchors |= {i - len(wanted) + 1 for i, token in enumerate(words_only) if token == wanted[-1]}
    for anchor in sorted(anchors):
        for length in range(len(wanted) - REPAIR_MAX_EDITS, len(wanted) + REPAIR_MAX_EDITS + 1):
            start, end = anchor, anchor + length
            if start < 0 or end > len(words_only) or length <= 0:
                continue
            stretch = words_only[start:end]
            if len(wanted_set.intersection(stretch)) < len(wanted_set) - REPAIR_MAX_EDITS:
                continue  # cheaply ruled out before aligning
            blocks = SequenceMatcher(None, wanted, stretch, autojunk=False).get_matching_blocks()
            edits = max(len(wanted), len(stretch)) - sum(block.size for block in blocks)
            if edits > REPAIR_MAX_EDITS:
                continue
            if best is None or edits < best[0]:
                best, tied = (edits, start, end), False
            elif edits == best[0] and not _overlaps(best[1], best[2], start, end):
                tied = True
    if best is None or tied:
        return None
    _, first, last = best
    start, end = tokens[first][1], tokens[last - 1][2]
    # Closing punctuation the quote kept ("... in 1970.") belongs to the span too.
    while end < len(page.text) and not page.text[end].isspace() and not page.text[end].isalnum():
        if normalise(unwrapped).endswith(page.text[end]):
            end += 1
        else:
            break
    return page.original_span(start, end)


def _overlaps(start: int, end: int, other_start: int, other_end: int) -> bool:
    return start < other_end and other_start < end


def repair_quote(page_text: str, quote: str) -> tuple[int, int] | None:
    """Offsets in `page_text` of the span a near-verbatim `quote` copies, or None (see `_repair_in`)."""
    return _repair_in(normalise_with_map(page_text), quote)


def _name_words(name: str) -> list[str]:
    """A name's words, its possessive removed: "Selmon's" -> ["selmon"]."""
    return words(re.sub(r"'s?$", "", normalise(name)))


def _singular(word: str) -> str:
    """A plural name's singular, for comparison only: "Kennedys" -> "kennedy"."""
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def unsupported_details(claim_text: str, quote: str, also_names: str = "") -> list[str]:
    """Numbers and capitalised names of the claim that its quote does not contain.

    A model may paraphrase, but may not add a date, a figure or a name the quote does not state.
    Names are compared by word tokens, case-folded, so a capitalised first word ("Directed by ...")
    is not reported when the quote has it in lower case; a possessive or plural form counts as the name.
    `also_names` is more text whose names count as stated (the page title).
    """
    quote_numbers = set(numbers(quote))
    quote_words = {_singular(word) for word in words(f"{quote}\n{also_names}")}
    missing: list[str] = []
    for number in numbers(claim_text):
        if number not in quote_numbers and number not in missing:
            missing.append(number)
    for name in names(claim_text):
        if name.casefold() in _ANSWER_WORDS:
            continue
        if not {_singular(word) for word in _name_words(name)} <= quote_words and name not in missing:
            missing.append(name)
    return missing


def content_support(claim_text: str, evidence: str, also: str = "") -> tuple[float, list[str]]:
    """The share of the claim's distinct content words (stemmed) found in `evidence` or `also`, and the
    words that are not. A claim with no content word is fully supported (it says nothing)."""
    said = set(content_stems(f"{evidence}\n{also}"))
    own = {word: stem(word) for word in dict.fromkeys(_content_words(claim_text))}
    if not own:
        return 1.0, []
    absent = [word for word, stemmed in own.items() if stemmed not in said]
    return 1 - len(absent) / len(own), absent


def _content_words(text: str) -> list[str]:
    return [word for word in words(re.sub(r"'s\b", "", normalise(text))) if word not in STOPWORDS]


def negated_scopes(text: str) -> list[set[str]]:
    """For each negation the text asserts, the stems of the content words it governs (up to
    NEGATION_SCOPE_WORDS, stopping at punctuation or a contrasting conjunction). Two kinds assert
    nothing negative: one in a condition ("if the ferries aren't refitted by spring, ...") and a double
    negative ("crossings are not possible without a refitted hull"), whose two negations cancel."""
    tokens = _NEGATION_TOKEN.findall(normalise(text).casefold())
    scopes = []
    conditional = cancelled = False
    for index, token in enumerate(tokens):
        if token in _CONDITIONS:
            conditional = True
        elif not token[0].isalnum():
            conditional = False  # a condition ends with its clause
        if not _is_negation(token) or conditional:
            continue
        if cancelled or (index + 1 < len(tokens) and tokens[index + 1] in _NOT_NEGATING_NEXT):
            cancelled = False
            continue
        scope: set[str] = set()
        for following in tokens[index + 1 :]:
            if following == "until":  # "did not play until 1990" says he played from 1990
                scope = set()
                break
            if following == ",":
                continue
            if _is_negation(following):
                if following != "nor":  # "not ... without" cancels; "neither ... nor" negates twice
                    scope, cancelled = set(), True
                break
            if not following[0].isalnum() or following in _SCOPE_ENDS:
                break
            scope.update(content_stems(following))
            if len(scope) >= NEGATION_SCOPE_WORDS:
                break
        if scope:
            scopes.append(scope)
    return scopes


def _is_negation(token: str) -> bool:
    return token in NEGATIONS or token.endswith("n't")


def _governs(scope: set[str], stems: set[str]) -> bool:
    """Whether a negation's scope is about the same thing as `stems`: two of its words are there (or
    its only word), so "not a member of the band" is not read as negating "toured with the band"."""
    return bool(scope) and len(scope & stems) >= min(2, len(scope))


def negation_conflict(text: str, evidence: list[str]) -> str:
    """'' when `text` and the quotes it rests on agree in polarity; otherwise what differs.

    A negation in the text whose words the evidence states without a negation, or a negation in the
    evidence whose words the text states without one, is a conflict: "did not make his debut" against
    "made his debut", or the reverse."""
    evidence_stems = {stemmed for quote in evidence for stemmed in content_stems(quote)}
    evidence_scopes = [scope for quote in evidence for scope in negated_scopes(quote)]
    return polarity_conflict(text, evidence_stems, evidence_scopes)


def polarity_conflict(text: str, evidence_stems: set[str], evidence_scopes: list[set[str]]) -> str:
    """`negation_conflict` against evidence already read: its content stems and its negations' scopes
    (`negated_scopes`), so that a caller weighing many pages reads each page once."""
    text_stems = set(content_stems(text))
    text_scopes = negated_scopes(text)
    # A negation is about what the text says only through the words it negates besides the text's names:
    # every quote of a page about "the Harbour Line" names it, and "the Harbour Line ferries are not
    # just about speed" says nothing of its refit.
    named = {stemmed for name in names(text) for stemmed in content_stems(name)}
    for scope in text_scopes:
        if _governs(scope - named, evidence_stems) and not any(
            _governs(scope, other) for other in evidence_scopes
        ):
            return "negates what its quote states"
    for scope in evidence_scopes:
        if _governs(scope - named, text_stems) and not any(_governs(scope, other) for other in text_scopes):
            return "leaves out a negation its quote states"
    return ""


def check_claim(text: str, quote: str, title: str, support_min: float) -> str:
    """Why a claim's text does not say what its (verbatim) quote says, or '' when it does."""
    if normalise(text).casefold() == normalise(quote).casefold():
        return ""
    if normalise(text).endswith("?"):
        return "a question, not a claim"
    if re.match(r"(?:if|whether|suppose)\b", normalise(text), re.IGNORECASE):
        return "a condition, not a claim"  # "If Gallu is a demon, Lilu is a demon": the question restated
    missing = unsupported_details(text, quote, title)
    if missing:
        return f"unsupported detail: {', '.join(missing)}"
    share, absent = content_support(text, quote, title)
    if share < support_min:
        return (
            f"unsupported content: {math.floor(share * 100)}% of its content words are in the quote "
            f"(at least {support_min:.0%} needed); not there: {', '.join(absent[:6])}"
        )
    return negation_conflict(text, [quote])


def locate(
    draft: ClaimDraft, page: NormalisedText, min_quote_chars: int
) -> tuple[str, tuple[int, int] | None]:
    """Where the draft's quote is on the page (repaired when near-verbatim), or why it cannot be."""
    if not normalise(draft.text):
        return "empty claim", None
    if len(normalise(draft.quote)) < min_quote_chars:
        return f"quote shorter than {min_quote_chars} characters", None
    span = _find_in(page, draft.quote) or _repair_in(page, draft.quote)
    if span is None:
        return "quote not found in page text", None
    return "", span


def verify_drafts(
    drafts: list[ClaimDraft],
    page: Page,
    subquestion_id: str,
    claim_prefix: str,
    min_quote_chars: int,
    support_min: float = Caps().claim_support_min,
    first_number: int = 1,
) -> list[Claim]:
    """One Claim per draft, ids f"{claim_prefix}.{n}" from n = `first_number`, verified or rejected
    with the reason.

    The quote must be on the page (verbatim up to normalisation, or repaired from a near-verbatim
    copy), and the claim must say what it says (`check_claim`, with `support_min` the share of its
    content words the quote must hold). An extractive claim is its quote and passes trivially.
    """
    normalised_page = normalise_with_map(page.text)
    claims: list[Claim] = []
    verified_quotes: dict[str, str] = {}  # normalised, case-folded quote -> id of the claim that has it
    for number, draft in enumerate(drafts, start=first_number):
        claim = Claim(
            id=f"{claim_prefix}.{number}",
            subquestion_id=subquestion_id,
            page_id=page.id,
            page_hash=page.content_hash,
            text=draft.text.strip(),
            quote=draft.quote,
            status=ClaimStatus.rejected,
        )
        reason, span = locate(draft, normalised_page, min_quote_chars)
        if span is not None:
            start, end = span
            # The stored quote is the page's own spelling, so it is verbatim by construction.
            claim = claim.model_copy(update={"quote": page.text[start:end]})
            reason = check_claim(claim.text, claim.quote, page.title, support_min)
        key = normalise(claim.quote).casefold()
        if not reason and key in verified_quotes:
            reason = f"duplicate of {verified_quotes[key]}"
        if reason or span is None:
            claims.append(claim.model_copy(update={"reason": reason}))
            continue
        verified_quotes[key] = claim.id
        update = {"quote_start": span[0], "quote_end": span[1], "status": ClaimStatus.verified}
        claims.append(claim.model_copy(update=update))
    return claims
