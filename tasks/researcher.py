"""Research one sub-question: search, fetch or read each result once, and record what the run read."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from citeflow.contracts import Outcome, RunSource, SubQuestion
from citeflow.web.research import WebResearch
from storage.store import EvidenceStore
from tasks.tracing import traced


class Researched(BaseModel):
    """What one sub-question's research produced: the pages read, and a line a person can follow."""

    model_config = ConfigDict(extra="forbid")

    subquestion_id: str
    sources: list[RunSource]
    counts: dict[str, int]  # URLs per status: fetched, stored, shared, skipped, failed
    summary: str


def research(
    store: EvidenceStore,
    web: WebResearch,
    run_id: str,
    subquestion: SubQuestion,
    limit: int,
    page_text_max_chars: int,
) -> Researched:
    """Search with the sub-question's query (at most `limit` results, whatever the provider returns),
    record every result and every failure, store fetched pages, and return the run sources, best first."""
    with traced(store, run_id, "research", web.searcher.name, subquestion.id) as step:
        outcome = web.research(subquestion, limit)
        step.actor = outcome.provider  # the provider that answered, not the whole fallback chain
        step.detail = outcome.fetch.summary()
        if outcome.errors:
            step.outcome = Outcome.degraded
    store.add_search_results(run_id, subquestion.id, outcome.results[:limit])
    for error in outcome.errors:
        store.add_error(error)
    sources = []
    for item in outcome.fetch.items[:limit]:
        page = store.put_page(item.page, page_text_max_chars)[0] if item.page else item.stored
        if page is None:
            continue
        source = RunSource(
            run_id=run_id,
            subquestion_id=subquestion.id,
            page_id=page.id,
            provider=item.result.provider,
            rank=item.result.rank,
        )
        store.add_run_source(source)
        sources.append(source)
    return Researched(
        subquestion_id=subquestion.id,
        sources=sources,
        counts=outcome.fetch.counts(),
        summary=outcome.fetch.summary(),
    )
