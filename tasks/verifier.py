"""Verify: claims proposed from each page are kept only if their quote is found in the stored text."""

from __future__ import annotations

from citeflow.contracts import Claim, RunSource, SubQuestion
from citeflow.roles import ClaimExtractor
from citeflow.verify import verify_drafts
from storage.store import EvidenceStore
from tasks.tracing import traced


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


def verify_page(
    store: EvidenceStore,
    extractor: ClaimExtractor,
    actor: str,
    run_id: str,
    subquestion: SubQuestion,
    page_id: str,
    claim_prefix: str,
    claims_per_page: int,
    quote_min_chars: int,
) -> list[Claim]:
    """Extract claims from one page for one sub-question, check each mechanically, store them all
    (rejected ones with their reason) and return them."""
    page = store.get_page(page_id)
    with traced(store, run_id, "verify", actor, subquestion.id) as step:
        drafts = extractor.extract(subquestion, page, claims_per_page)[:claims_per_page]
        step.detail = f"page {page_id}: {len(drafts)} claims proposed"
    claims = verify_drafts(
        drafts,
        page,
        subquestion_id=subquestion.id,
        run_id=run_id,
        claim_prefix=claim_prefix,
        min_quote_chars=quote_min_chars,
    )
    store.add_claims(claims)
    return claims
