"""Research one sub-question: search, fetch or read each result once, and store the pages found.

The task only finds and stores pages (a page is stored once, keyed by its content, whichever run found
it) and returns them with no run or sub-question id; what the run read is recorded by `record_research`
in the flow, so a cached result is recorded for the run that reuses it just as a fresh one is.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from prefect import task
from pydantic import BaseModel, ConfigDict

from citeflow.contracts import Outcome, RunError, RunSource, SearchResult, SubQuestion
from citeflow.web.providers import provider_chain
from citeflow.web.research import STAGE, WebResearch
from storage.search import index_state
from storage.store import EvidenceStore
from tasks.caching import StageKey
from tasks.context import current_run
from tasks.tracing import traced


class FoundPage(BaseModel):
    """A page research found for a query (its store id, who found it, at which rank): a run records it
    as a `RunSource` of one of its sub-questions."""

    model_config = ConfigDict(extra="forbid")

    page_id: str
    provider: str
    rank: int


class Researched(BaseModel):
    """What one query's research produced: the pages read, with the URLs per outcome. It names no
    run and no sub-question: a result cached by query is reused by runs that number their sub-questions
    differently, and `record_research` files it under the run and sub-question that read it."""

    model_config = ConfigDict(extra="forbid")

    results: list[SearchResult]
    pages: list[FoundPage]
    failures: list[str]  # provider failures, skipped and failed URLs, one line each
    counts: dict[str, int]  # URLs per status: fetched, stored, shared, skipped, failed
    tally: str  # a line a person can follow: URLs fetched, from the store, skipped, failed


def research(
    store: EvidenceStore,
    web: WebResearch,
    run_id: str,
    subquestion: SubQuestion,
    limit: int,
    page_text_max_chars: int,
) -> Researched:
    """Search with the sub-question's query (at most `limit` results, whatever the provider returns),
    store fetched pages, and return the pages found, best first, with every failure."""
    with traced(store, run_id, "research", web.searcher.name, subquestion.id) as step:
        outcome = web.research(subquestion, limit)
        step.actor = outcome.provider  # the provider that answered, not the whole fallback chain
        step.detail = outcome.fetch.summary()
        if outcome.errors:
            step.outcome = Outcome.degraded
    items = outcome.fetch.items[:limit]
    # The pages fetched, stored in one transaction after the network is done.
    fetched = iter(store.put_fetched([item.page for item in items if item.page], page_text_max_chars))
    pages = []
    for item in items:
        page = next(fetched)[0] if item.page else item.stored
        if page is not None:
            pages.append(FoundPage(page_id=page.id, provider=item.result.provider, rank=item.result.rank))
    return Researched(
        results=outcome.results[:limit],
        pages=pages,
        failures=[error.detail for error in outcome.errors],
        counts=outcome.fetch.counts(),
        tally=outcome.fetch.tally(),
    )


def record_research(
    store: EvidenceStore, run_id: str, subquestion_id: str, researched: Researched
) -> list[RunSource]:
    """What the run read for one sub-question, as this run's rows, computed now or reused from the cache
    alike; returns the run's sources."""
    sources = [
        RunSource(run_id=run_id, subquestion_id=subquestion_id, **page.model_dump())
        for page in researched.pages
    ]
    errors = [
        RunError(run_id=run_id, stage=STAGE, subquestion_id=subquestion_id, detail=detail)
        for detail in researched.failures
    ]
    store.add_research(run_id, subquestion_id, researched.results, sources, errors)
    return sources


def _research_key(inputs: dict[str, Any]) -> list[Any]:
    """The query and where it is searched. The store's identity keeps a cached result from naming pages
    of another store; the local index's state makes an ingest since the last run miss the cache when
    local search answers first (when it is only a fallback, web results hold for the freshness window)."""
    run = current_run()
    settings, caps = run.settings, run.settings.caps
    subquestion: SubQuestion = inputs["subquestion"]
    chain = provider_chain(settings.web, settings.search, local_available=True)
    local_first = chain[0] == "local"
    return [
        subquestion.query,
        chain,
        caps.pages_per_search,
        caps.page_text_max_chars,
        run.store.identity(),
        index_state(run.store) if local_first else None,
    ]


@task(
    name="research",
    task_run_name="research-{subquestion.id}",
    retries=2,
    retry_delay_seconds=[2, 8],
    retry_jitter_factor=0.5,
    cache_policy=StageKey(stage="research", parts=_research_key),
    # The flow sets cache_expiration to the web freshness window of the run's settings.
    cache_expiration=timedelta(hours=24),
)
def research_task(subquestion: SubQuestion) -> Researched:
    # No Prefect timeout_seconds: it cannot interrupt a sync task's thread (measured), so the limits are
    # the fetcher's connect/read/total timeouts.
    run = current_run()
    caps = run.settings.caps
    return research(
        run.store, run.web, run.run_id, subquestion, caps.pages_per_search, caps.page_text_max_chars
    )
