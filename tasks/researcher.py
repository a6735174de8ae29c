"""Research one sub-question: search, fetch or read each result once, and store the pages found.

The task only finds and stores pages (a page is stored once, keyed by its content, whichever run found
it); what the run read is recorded by `record_research` in the flow, so a cached result is recorded for
the run that reuses it just as a fresh one is.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from prefect import task
from pydantic import BaseModel, ConfigDict

from citeflow.contracts import Outcome, RunError, RunSource, SearchResult, SubQuestion
from citeflow.web.providers import provider_chain
from citeflow.web.research import WebResearch
from storage.search import index_state
from storage.store import EvidenceStore
from tasks.caching import StageKey
from tasks.context import current_run
from tasks.tracing import traced


class Researched(BaseModel):
    """What one sub-question's research produced: the pages read, and a line a person can follow."""

    model_config = ConfigDict(extra="forbid")

    subquestion_id: str
    results: list[SearchResult]
    sources: list[RunSource]
    errors: list[RunError]
    counts: dict[str, int]  # URLs per status: fetched, stored, shared, skipped, failed
    summary: str

    def for_subquestion(self, subquestion_id: str) -> Researched:
        """The same research under this run's sub-question id: a result cached by query may have been
        computed for a sub-question another run numbered differently."""
        return self.model_copy(
            update={
                "subquestion_id": subquestion_id,
                "sources": [s.model_copy(update={"subquestion_id": subquestion_id}) for s in self.sources],
                "errors": [e.model_copy(update={"subquestion_id": subquestion_id}) for e in self.errors],
            }
        )


def research(
    store: EvidenceStore,
    web: WebResearch,
    run_id: str,
    subquestion: SubQuestion,
    limit: int,
    page_text_max_chars: int,
) -> Researched:
    """Search with the sub-question's query (at most `limit` results, whatever the provider returns),
    store fetched pages, and return the run sources, best first, with every failure."""
    with traced(store, run_id, "research", web.searcher.name, subquestion.id) as step:
        outcome = web.research(subquestion, limit)
        step.actor = outcome.provider  # the provider that answered, not the whole fallback chain
        step.detail = outcome.fetch.summary()
        if outcome.errors:
            step.outcome = Outcome.degraded
    sources = []
    with store.session():  # the pages found, stored in one hold of the file, after the network is done
        for item in outcome.fetch.items[:limit]:
            page = store.put_page(item.page, page_text_max_chars)[0] if item.page else item.stored
            if page is None:
                continue
            sources.append(
                RunSource(
                    run_id=run_id,
                    subquestion_id=subquestion.id,
                    page_id=page.id,
                    provider=item.result.provider,
                    rank=item.result.rank,
                )
            )
    return Researched(
        subquestion_id=subquestion.id,
        results=outcome.results[:limit],
        sources=sources,
        errors=outcome.errors,
        counts=outcome.fetch.counts(),
        summary=outcome.fetch.summary(),
    )


def record_research(store: EvidenceStore, run_id: str, researched: Researched) -> None:
    """What the run read for one sub-question, as this run's rows (a cached result names another run)."""
    store.add_search_results(run_id, researched.subquestion_id, researched.results)
    for error in researched.errors:
        store.add_error(error.model_copy(update={"run_id": run_id}))
    for source in researched.sources:
        store.add_run_source(source.model_copy(update={"run_id": run_id}))


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
