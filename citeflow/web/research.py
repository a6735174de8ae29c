"""Web research for one run: search, then fetch each result once, as the researcher stage needs it.

A run makes one `WebResearch` and its researcher tasks (threads of one process) share it. Each
canonical URL is fetched at most once per run, whichever sub-question asks first; a page the store
holds from within the freshness window is read from the store instead of the network. Each call
returns what happened to every URL, so progress and error rows need no further bookkeeping.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from citeflow.contracts import Page, PageInput, RunError, SearchResult, SubQuestion
from citeflow.errors import FetchError
from citeflow.search import Searcher
from citeflow.urls import canonical_url
from citeflow.web.breaker import BreakerBoard
from citeflow.web.fetcher import Fetcher
from citeflow.web.guard import FetchRefused
from citeflow.web.providers import FallbackSearch, make_searcher
from citeflow.web.settings import WebSettings

STAGE = "research"

Lookup = Callable[[str], Page | None]  # the store's latest page for a canonical URL; stored_at in UTC


class UrlStatus(StrEnum):
    fetched = "fetched"  # fetched from the network by this call
    stored = "stored"  # read from the store: fresh enough, or found by local search
    shared = "shared"  # fetched earlier in this run for another sub-question
    skipped = "skipped"  # policy: scheme, address, robots.txt, open breaker
    failed = "failed"  # network, HTTP status, size or time cap, no usable text


class UrlOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    result: SearchResult
    status: UrlStatus
    reason: str = ""
    page: PageInput | None = Field(default=None, description="Set when fetched or shared: store it.")
    stored: Page | None = Field(default=None, description="Set when read from the store.")


class FetchOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    subquestion_id: str
    items: list[UrlOutcome]

    def counts(self) -> dict[str, int]:
        return {status.value: sum(1 for item in self.items if item.status is status) for status in UrlStatus}

    def tally(self) -> str:
        """The URLs per outcome, e.g. `3 fetched, 1 from store, 0 skipped, 1 failed`."""
        c = self.counts()
        return (
            f"{c['fetched'] + c['shared']} fetched, {c['stored']} from store, "
            f"{c['skipped']} skipped, {c['failed']} failed"
        )

    def summary(self) -> str:
        """One line a person can follow, e.g. `q1: 3 fetched, 1 from store, 0 skipped, 1 failed`."""
        return f"{self.subquestion_id}: {self.tally()}"


class ResearchOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: str | None = Field(description="The search provider whose results were used.")
    results: list[SearchResult] = Field(description="Every search result: record them with the run.")
    fetch: FetchOutcome
    errors: list[RunError] = Field(description="Provider failures, breaker events, skipped and failed URLs.")


class FetchSession:
    """Deduplicates fetches by canonical URL across the threads of one run."""

    def __init__(
        self,
        fetcher: Fetcher,
        lookup: Lookup | None = None,
        freshness: timedelta = timedelta(hours=24),
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.fetcher = fetcher
        self.lookup = lookup
        self.freshness = freshness
        self._now = now
        self._lock = threading.Lock()
        self._claims: dict[str, Future[UrlOutcome]] = {}

    def pages_for(self, subquestion_id: str, results: list[SearchResult]) -> FetchOutcome:
        """What became of each result's URL; fetches run in parallel, limited per host."""
        if not results:
            return FetchOutcome(subquestion_id=subquestion_id, items=[])
        with ThreadPoolExecutor(
            max_workers=len(results), thread_name_prefix=f"fetch-{subquestion_id}"
        ) as pool:
            items = list(pool.map(self._one, results))
        return FetchOutcome(subquestion_id=subquestion_id, items=items)

    def _one(self, result: SearchResult) -> UrlOutcome:
        canonical = canonical_url(result.url)
        with self._lock:
            claim = self._claims.get(canonical)
            owner = claim is None
            if claim is None:
                claim = self._claims[canonical] = Future()
        if not owner:
            earlier = claim.result()
            status = UrlStatus.shared if earlier.status is UrlStatus.fetched else earlier.status
            return earlier.model_copy(update={"result": result, "status": status})
        try:
            outcome = self._resolve(result, canonical)
        except BaseException as error:  # let waiting threads see the same error, then re-raise it
            claim.set_exception(error)
            raise
        if outcome.page is not None:
            final = canonical_url(outcome.page.url)
            with self._lock:  # a later result naming the redirect target must not fetch it again
                self._claims.setdefault(final, claim)
        claim.set_result(outcome)
        return outcome

    def _resolve(self, result: SearchResult, canonical: str) -> UrlOutcome:
        stored = self._from_store(result, canonical)
        if stored is not None:
            return UrlOutcome(result=result, status=UrlStatus.stored, stored=stored)
        if result.page_id is not None:  # a result naming a stored page is never fetched from the web
            reason = "local search named a page the store no longer holds"
            return UrlOutcome(result=result, status=UrlStatus.failed, reason=reason)
        try:
            page = self.fetcher.fetch(result.url)
        except FetchRefused as error:
            return UrlOutcome(result=result, status=UrlStatus.skipped, reason=str(error))
        except FetchError as error:
            return UrlOutcome(result=result, status=UrlStatus.failed, reason=str(error))
        return UrlOutcome(result=result, status=UrlStatus.fetched, page=page)

    def _from_store(self, result: SearchResult, canonical: str) -> Page | None:
        if self.lookup is None:
            return None
        page = self.lookup(canonical)
        if page is None:
            return None
        if result.page_id is not None:
            return page  # local search found it in the store: it is the evidence, however old
        return page if self._now() - page.stored_at <= self.freshness else None


class WebResearch:
    """Search and fetch for one run. `research(subquestion, limit)` is the researcher stage's one call."""

    def __init__(self, run_id: str, searcher: FallbackSearch, session: FetchSession) -> None:
        self.run_id = run_id
        self.searcher = searcher
        self.session = session

    def close(self) -> None:
        self.searcher.close()
        self.session.fetcher.close()

    def research(self, subquestion: SubQuestion, limit: int) -> ResearchOutcome:
        report = self.searcher.search_report(subquestion.query, limit)
        fetch = self.session.pages_for(subquestion.id, report.results)
        details = [*report.failures]
        details += [f"{item.status.value}: {item.reason}" for item in fetch.items if item.reason]
        if not report.results:
            details.append(f"no sources: no search provider returned results for {subquestion.query!r}")
        errors = [
            RunError(run_id=self.run_id, stage=STAGE, subquestion_id=subquestion.id, detail=detail)
            for detail in details
        ]
        return ResearchOutcome(
            provider=report.provider,
            results=report.results,
            fetch=fetch,
            errors=errors,
        )


def open_research(
    run_id: str,
    search: str | list[str] | None,
    settings: WebSettings,
    lookup: Lookup | None = None,
    local: Searcher | None = None,
) -> WebResearch:
    """Everything a run needs for web research, built from settings; close it when the run ends.

    With `lookup` (the store's latest page for a URL), pages stored within the freshness window are
    reused; with `local` (search over the store), the provider chain may include `local`.
    """
    provider_breakers = BreakerBoard(settings.breaker_threshold, settings.breaker_cooldown)
    searcher = make_searcher(search, settings, provider_breakers, local=local)
    fetcher = Fetcher(settings, BreakerBoard(settings.breaker_threshold, settings.breaker_cooldown))
    session = FetchSession(fetcher, lookup, timedelta(hours=settings.freshness_hours))
    return WebResearch(run_id, searcher, session)
