"""Verify: claims proposed from each page are kept only if their quote is found in the stored text."""

from __future__ import annotations

from typing import Any

from prefect import task

from citeflow.contracts import Claim, Page, RunSource, SubQuestion
from citeflow.llm.settings import RoleName
from citeflow.roles import ClaimExtractor
from citeflow.verify import verify_drafts
from tasks.caching import StageKey, cached_unless_degraded, role_identity
from tasks.context import current_run
from tasks.retries import not_rejected
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
    extractor: ClaimExtractor,
    run_id: str,
    subquestion: SubQuestion,
    page: Page,
    claim_prefix: str,
    claims_per_page: int,
    quote_min_chars: int,
) -> list[Claim]:
    """Extract claims from one page for one sub-question and check each mechanically: every claim comes
    back, rejected ones with their reason."""
    drafts = extractor.extract(subquestion, page, claims_per_page)[:claims_per_page]
    return verify_drafts(
        drafts,
        page,
        subquestion_id=subquestion.id,
        run_id=run_id,
        claim_prefix=claim_prefix,
        min_quote_chars=quote_min_chars,
    )


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
        settings.models.verifier_page_chars,
    ]


@task(
    name="verify",
    task_run_name="verify-{claim_prefix}",
    retries=1,
    retry_delay_seconds=2,
    retry_condition_fn=not_rejected,
    cache_policy=StageKey(stage="verify", parts=_verify_key),
)
def verify_task(subquestion: SubQuestion, page_id: str, claim_prefix: str) -> list[Claim]:
    """Every claim proposed from the page, checked. The flow stores them for its run (a cached result
    carries the run id of the run that computed it)."""
    run = current_run()
    caps = run.settings.caps
    page = run.store.get_page(page_id)
    with traced(run.store, run.run_id, "verify", run.engine.name, subquestion.id) as step:
        with cached_unless_degraded(run.models.degradations):
            claims = verify_page(
                run.engine.extractor,
                run.run_id,
                subquestion,
                page,
                claim_prefix,
                caps.claims_per_page,
                caps.quote_min_chars,
            )
        step.detail = f"page {page_id}: {len(claims)} claims proposed"
    return claims
