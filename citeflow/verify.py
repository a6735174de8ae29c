"""The mechanical check of claims: a claim is verified only if its quote is found in the stored page.

No model takes part here. Quote and page are compared after `normalise`, and the offsets stored are
those of the ORIGINAL page text, so the stored quote is the page's own verbatim substring.
"""

from __future__ import annotations

from citeflow.contracts import Claim, ClaimDraft, ClaimStatus, Page
from citeflow.text import NormalisedText, names, normalise, normalise_with_map, numbers, words


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


def unsupported_details(claim_text: str, quote: str) -> list[str]:
    """Numbers and capitalised names of the claim that its quote does not contain.

    A model may paraphrase, but may not add a date, a figure or a name the quote does not state.
    Names are compared by word tokens, case-folded, so a capitalised first word ("Directed by ...")
    is not reported when the quote has it in lower case.
    """
    quote_numbers = set(numbers(quote))
    quote_words = set(words(quote))
    missing: list[str] = []
    for number in numbers(claim_text):
        if number not in quote_numbers and number not in missing:
            missing.append(number)
    for name in names(claim_text):
        if not set(words(name)) <= quote_words and name not in missing:
            missing.append(name)
    return missing


def _rejection(
    draft: ClaimDraft,
    page: NormalisedText,
    min_quote_chars: int,
) -> tuple[str, tuple[int, int] | None]:
    """Why the draft fails the mechanical check ('' if it passes), and where its quote is."""
    if not normalise(draft.text):
        return "empty claim", None
    if len(normalise(draft.quote)) < min_quote_chars:
        return f"quote shorter than {min_quote_chars} characters", None
    span = _find_in(page, draft.quote)
    if span is None:
        return "quote not found in page text", None
    missing = unsupported_details(draft.text, draft.quote)
    if missing:
        return f"unsupported detail: {', '.join(missing)}", span
    return "", span


def verify_drafts(
    drafts: list[ClaimDraft],
    page: Page,
    subquestion_id: str,
    run_id: str,
    claim_prefix: str,
    min_quote_chars: int,
) -> list[Claim]:
    """One Claim per draft, ids f"{claim_prefix}.{n}", verified or rejected with the reason.

    A claim's text may paraphrase its quote, so every number and name in it must be in the quote
    too (an extractive claim is its quote and passes trivially).
    """
    normalised_page = normalise_with_map(page.text)
    claims: list[Claim] = []
    verified_quotes: dict[str, str] = {}  # normalised, case-folded quote -> id of the claim that has it
    for number, draft in enumerate(drafts, start=1):
        claim = Claim(
            id=f"{claim_prefix}.{number}",
            run_id=run_id,
            subquestion_id=subquestion_id,
            page_id=page.id,
            page_hash=page.content_hash,
            text=draft.text.strip(),
            quote=draft.quote,
            status=ClaimStatus.rejected,
        )
        reason, span = _rejection(draft, normalised_page, min_quote_chars)
        key = normalise(draft.quote).casefold()
        if not reason and key in verified_quotes:
            reason = f"duplicate of {verified_quotes[key]}"
        if reason or span is None:
            claims.append(claim.model_copy(update={"reason": reason}))
            continue
        verified_quotes[key] = claim.id
        start, end = span
        # The stored quote is the page's own spelling, so it is verbatim by construction.
        update = {"quote": page.text[start:end], "quote_start": start, "quote_end": end}
        claims.append(claim.model_copy(update={**update, "status": ClaimStatus.verified}))
    return claims
