"""Verify: claims proposed from each page are kept only if their quote is found in the stored text and
they say what it says (citeflow/verify.py).

A model is asked about a page only when the page shares words with the sub-question (`about`).
A page longer than the engine's window is read in windows, the most relevant to the sub-question
first, until the claims cap is reached. The cap is filled with the verifier's verified claims first,
then the fallback verifier's (the extractive engine's): a model that keeps one sentence of a page does
not cost the page's other evidence. When the verifier's reply is unusable, or none of its claims
passes the checks, the page is the fallback's alone, and the run records the degradation: one bad
reply costs that page's model claims, never the page.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from prefect import task

from citeflow.contracts import Claim, ClaimDraft, ClaimStatus, Outcome, Page, RunSource, SubQuestion
from citeflow.llm.errors import DegradableError
from citeflow.llm.settings import RoleName
from citeflow.roles import ClaimVerifier, Engine
from citeflow.text import content_stems, normalise, split_sentences
from citeflow.verify import verify_drafts
from tasks.caching import Computed, StageKey, cached_unless_transient, role_identity
from tasks.context import current_run
from tasks.retries import not_rejected
from tasks.tracing import Step, traced

# A page must share this many content words with its sub-question before a model is asked about it
# (the extractive verifier asks the same of its query): on hotpotqa-100, 5 of 11 pages a model
# verifier read for one question were found on a single stray word, at about 90 s a page on a CPU.
PAGE_MIN_SHARED_STEMS = 2


def select_pages(sources: list[RunSource], max_pages: int) -> tuple[list[tuple[str, str]], int]:
    """Choose what to verify, at most `max_pages` page reads, as (page_id, subquestion_id) pairs.

    Pages are taken rank by rank across sub-questions (every sub-question's best page before any
    second-best), so a cap never starves a sub-question. A page found by several sub-questions is read
    for the one that ranked it best, and again only for a sub-question that has no page of its own yet
    (a small store may hold the same few pages for every sub-question). Also returns how many distinct
    pages were found in all."""
    pairs: list[tuple[str, str]] = []
    chosen: set[str] = set()
    served: set[str] = set()
    for source in sorted(sources, key=lambda source: source.rank):  # stable: sub-question order in a rank
        if source.page_id in chosen and source.subquestion_id in served:
            continue
        if len(pairs) == max_pages:
            break
        pairs.append((source.page_id, source.subquestion_id))
        chosen.add(source.page_id)
        served.add(source.subquestion_id)
    return pairs, len({source.page_id for source in sources})


def page_windows(text: str, window_chars: int | None, query: str, windows_max: int) -> list[str]:
    """The page text in windows of at most `window_chars`, cut between sentences (a longer sentence is
    cut where the window ends), and the `windows_max` sharing most words with `query`, best first
    (ties: earlier first). The whole text when it fits one window."""
    if window_chars is None or len(text) <= window_chars:
        return [text]
    windows: list[str] = []
    start = end = 0
    for span in split_sentences(text):
        if span.end - start > window_chars and end > start:
            windows.append(text[start:end])
            start = span.start
        while span.end - start > window_chars:  # one sentence longer than a window
            windows.append(text[start : start + window_chars])
            start += window_chars
        end = span.end
    if end > start:
        windows.append(text[start:end])
    wanted = set(content_stems(query))
    ranked = sorted(range(len(windows)), key=lambda n: (-len(wanted & set(content_stems(windows[n]))), n))
    return [windows[n] for n in ranked[:windows_max]]


def about(subquestion: SubQuestion, page: Page) -> bool:
    """Whether the page shares at least PAGE_MIN_SHARED_STEMS content words (stemmed) with the
    sub-question (or all of them when it has fewer): a page search found on one stray word is not."""
    wanted = set(content_stems(f"{subquestion.text} {subquestion.query}"))
    shared = wanted & set(content_stems(f"{page.title}\n{page.text}"))
    return len(shared) >= min(PAGE_MIN_SHARED_STEMS, len(wanted))


def propose(
    verifier: ClaimVerifier, subquestion: SubQuestion, page: Page, limit: int, windows: list[str]
) -> list[ClaimDraft]:
    """Up to `limit` drafts, window by window until the limit is reached."""
    drafts: list[ClaimDraft] = []
    for window in windows:
        shown = page if window == page.text else page.model_copy(update={"text": window})
        drafts += verifier.extract(subquestion, shown, limit - len(drafts))[: limit - len(drafts)]
        if len(drafts) >= limit:
            break
    return drafts


def _overlaps(quote: str, other: str) -> bool:
    """Whether two normalised quotes repeat each other: one holds the other."""
    return quote in other or other in quote


def _why_none_verified(drafts: list[ClaimDraft], claims: list[Claim]) -> tuple[str, str]:
    """(full reason, a few words for the caveat) when no model claim of a page was verified."""
    if not drafts:
        return "the reply proposed no claims", "were none"
    reasons = Counter(claim.reason.split(":")[0] for claim in claims)
    listed = ", ".join(f"{reason} ({count})" for reason, count in reasons.most_common())
    return f"all {len(drafts)} proposed claims failed the checks: {listed}", "all failed the checks"


def verify_page(
    engine: Engine,
    subquestion: SubQuestion,
    page: Page,
    claim_prefix: str,
    claims_per_page: int,
    quote_min_chars: int,
    support_min: float,
    step: Step,
) -> list[Claim]:
    """Extract claims from one page for one sub-question and check each mechanically: every claim comes
    back, rejected ones with their reason. With a fallback engine, the fallback's claims for the same
    page come after the model's, and a page the model verified nothing from is a recorded degradation."""

    def checked(drafts: list[ClaimDraft], first: int) -> list[Claim]:
        return verify_drafts(
            drafts,
            page,
            subquestion_id=subquestion.id,
            claim_prefix=claim_prefix,
            min_quote_chars=quote_min_chars,
            support_min=support_min,
            first_number=first,
        )

    fallback = engine.fallback_for("verifier")
    if fallback is not None and not about(subquestion, page):
        # Not worth a model call; the extractive verifier, which costs none, reads it as it would alone.
        step.detail = f"page {page.id}: not about the sub-question, so no model was asked"
        return checked(fallback.verifier.extract(subquestion, page, claims_per_page), 1)
    windows = page_windows(page.text, engine.window_chars, subquestion.query, engine.windows_max)
    failure: DegradableError | None = None
    try:
        drafts = propose(engine.verifier, subquestion, page, claims_per_page, windows)
    except DegradableError as error:
        drafts, failure = [], error
    claims = checked(drafts, 1)
    verified = sum(claim.status is ClaimStatus.verified for claim in claims)
    read = f"{len(windows)} window(s) of {len(page.text):,} characters" if len(windows) > 1 else ""
    step.detail = f"page {page.id}: {len(drafts)} claims proposed, {verified} verified" + (
        f", from {read}" if read else ""
    )
    if fallback is None:
        return claims
    # The extractive verifier's claims come beside the model's (each proposer within the claims cap),
    # those repeating a verified model quote left out: the model path keeps the evidence the extractive
    # engine alone would have found on this page.
    have = [normalise(c.quote).casefold() for c in claims if c.status is ClaimStatus.verified]
    extra = [
        draft
        for draft in fallback.verifier.extract(subquestion, page, claims_per_page)
        if not any(_overlaps(normalise(draft.quote).casefold(), quote) for quote in have)
    ][:claims_per_page]
    added = checked(extra, len(claims) + 1)
    kept = sum(claim.status is ClaimStatus.verified for claim in added)
    step.detail += f"; extractive: {kept} verified"
    if not verified:
        if failure is not None:
            reason, why = str(failure), failure.what
        else:
            reason, why = _why_none_verified(drafts, claims)
        engine.degradations.add(
            "verifier",
            page.url,
            f"page {page.id}: {reason}; the extractive verifier verified {kept} claim(s)",
            f"The verifier model's claims for a page {why}; the extractive verifier read the page.",
            transient=failure is not None and failure.transient,
        )
        step.outcome = Outcome.degraded
    return claims + added


def _verify_key(inputs: dict[str, Any]) -> list[Any]:
    """The page id is a hash of the page's URL and content, so it stands for the text that was read; the
    claim prefix keeps claim ids stable, and is the same for an unchanged run."""
    settings = current_run().settings
    subquestion: SubQuestion = inputs["subquestion"]
    return [
        inputs["page_id"],
        inputs["claim_prefix"],
        subquestion.id,
        subquestion.text,
        subquestion.query,
        role_identity(settings, RoleName.verifier),
        settings.caps.claims_per_page,
        settings.caps.quote_min_chars,
        settings.caps.claim_support_min,
        settings.models.verifier_page_chars,
        settings.models.verifier_windows_max,
    ]


@task(
    name="verify",
    task_run_name="verify-{claim_prefix}",
    retries=1,
    retry_delay_seconds=2,
    retry_condition_fn=not_rejected,
    cache_policy=StageKey(stage="verify", parts=_verify_key),
)
def verify_task(subquestion: SubQuestion, page_id: str, claim_prefix: str) -> Computed[list[Claim]]:
    """Every claim proposed from the page, checked, with the fallbacks of its calls. The claims name no
    run: the flow files them under its own, whether it computed them or reused them from the cache."""
    run = current_run()
    caps = run.settings.caps
    page = run.store.get_page(page_id)
    with (
        traced(run.store, run.run_id, "verify", run.engine.name, subquestion.id) as step,
        cached_unless_transient(run.models.degradations) as fallbacks,
    ):
        claims = verify_page(
            run.engine,
            subquestion,
            page,
            claim_prefix,
            caps.claims_per_page,
            caps.quote_min_chars,
            caps.claim_support_min,
            step,
        )
    return Computed(claims, fallbacks)
