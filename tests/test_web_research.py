"""One run's web research: search, one fetch per canonical URL across sub-questions, freshness, progress."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from web_servers import LoopbackServer, Site, failing_routes, running_site, searxng_routes, settings_for

from citeflow.contracts import Origin, Page, SearchResult, SubQuestion
from citeflow.web.breaker import BreakerBoard
from citeflow.web.fetcher import Fetcher
from citeflow.web.providers import make_searcher
from citeflow.web.research import FetchSession, UrlStatus, WebResearch, open_research

NOW = datetime(2025, 1, 10, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def web() -> Iterator[Site]:
    with running_site() as site:
        yield site


def result(url: str, rank: int = 1, provider: str = "searxng") -> SearchResult:
    page_id = hashlib.sha256(url.encode()).hexdigest()[:16] if provider == "local" else None  # as LocalSearch
    return SearchResult(url=url, title="t", snippet="s", provider=provider, rank=rank, page_id=page_id)


def stored_page(url: str, stored_at: datetime, origin: Origin = Origin.fetched) -> Page:
    text = "A page the store already holds, about boiling water at altitude."
    return Page(
        id=hashlib.sha256(url.encode()).hexdigest()[:16],
        url=url,
        canonical_url=url,
        title="Stored",
        text=text,
        content_hash=hashlib.sha256(text.encode()).hexdigest(),
        origin=origin,
        stored_at=stored_at,
    )


def test_each_canonical_url_is_fetched_once_across_concurrent_subquestions(web: Site) -> None:
    page = web.site.url("/articles/tea.html")
    spellings = [
        page,
        page + "?utm_source=news&fbclid=abc",
        page + "#brewing",
        page.replace("http://", "HTTP://"),  # canonical_url lower-cases the scheme
    ]
    before = web.site.paths().count("/articles/tea.html")
    session = FetchSession(Fetcher(settings_for(web.site)))
    outcomes = {}

    def research(qid: str) -> None:
        outcomes[qid] = session.pages_for(qid, [result(url, i) for i, url in enumerate(spellings, start=1)])

    threads = [threading.Thread(target=research, args=(f"q{i}",)) for i in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert web.site.paths().count("/articles/tea.html") - before == 1
    statuses = [item.status for outcome in outcomes.values() for item in outcome.items]
    assert statuses.count(UrlStatus.fetched) == 1 and statuses.count(UrlStatus.shared) == 15
    assert all(
        item.page and "Camellia sinensis" in item.page.text for o in outcomes.values() for item in o.items
    )


def test_redirect_target_is_not_fetched_again_under_its_own_url(web: Site) -> None:
    session = FetchSession(Fetcher(settings_for(web.site)))
    before = web.site.paths().count("/articles/boiling.html")
    first = session.pages_for("q1", [result(web.site.url("/redirect/two"))])
    second = session.pages_for("q2", [result(web.site.url("/articles/boiling.html"))])
    assert first.items[0].status is UrlStatus.fetched and second.items[0].status is UrlStatus.shared
    assert web.site.paths().count("/articles/boiling.html") - before == 1


def test_fresh_stored_page_is_read_from_the_store_and_stale_one_refetched(web: Site) -> None:
    url = web.site.url("/articles/boiling.html")
    ages = {url: timedelta(hours=2)}
    asked: list[str] = []

    def lookup(canonical: str) -> Page | None:
        asked.append(canonical)
        return stored_page(canonical, NOW - ages[canonical]) if canonical in ages else None

    before = web.site.paths().count("/articles/boiling.html")
    fresh = FetchSession(Fetcher(settings_for(web.site)), lookup, timedelta(hours=24), now=lambda: NOW)
    item = fresh.pages_for("q1", [result(url + "?utm_campaign=x")]).items[0]
    assert asked == [url]  # looked up by canonical URL
    assert item.status is UrlStatus.stored and item.stored is not None and item.page is None
    assert web.site.paths().count("/articles/boiling.html") == before  # no network

    ages[url] = timedelta(hours=30)
    stale = FetchSession(Fetcher(settings_for(web.site)), lookup, timedelta(hours=24), now=lambda: NOW)
    assert stale.pages_for("q1", [result(url)]).items[0].status is UrlStatus.fetched
    assert web.site.paths().count("/articles/boiling.html") == before + 1


def test_local_results_come_from_the_store_whatever_their_age(web: Site) -> None:
    old = stored_page("local:docs/boiling.md", NOW - timedelta(days=400), Origin.ingested)
    session = FetchSession(
        Fetcher(settings_for(web.site)), lambda c: old if c == old.url else None, now=lambda: NOW
    )
    outcome = session.pages_for(
        "q1", [result(old.url, provider="local"), result("local:gone.md", 2, "local")]
    )
    assert [item.status for item in outcome.items] == [UrlStatus.stored, UrlStatus.failed]
    assert "no longer holds" in outcome.items[1].reason


def test_research_with_searxng_fetches_extracts_and_reports_each_url(web: Site) -> None:
    hits = [
        {"url": web.site.url("/articles/boiling.html"), "title": "Boiling", "content": "altitude"},
        {"url": web.site.url("/private/secret.html"), "title": "Private", "content": ""},
        {"url": web.site.url("/binary.html"), "title": "Binary", "content": ""},
        {"url": web.forbidden.url("/steal"), "title": "Inward", "content": ""},
        {"url": web.site.url("/articles/injection.html"), "title": "Tea growing", "content": ""},
    ]
    with LoopbackServer(searxng_routes(hits)) as searx:
        settings = settings_for(web.site, searxng_url=searx.url(""), provider_order=("searxng",))
        research = open_research("run-1", "searxng", settings)
        question = SubQuestion(id="q1", position=0, text="Why?", query="boiling point altitude")
        outcome = research.research(question, limit=5)
        research.close()
    assert outcome.provider == "searxng" and [r.rank for r in outcome.results] == [1, 2, 3, 4, 5]
    statuses = [item.status for item in outcome.fetch.items]
    assert statuses == [
        UrlStatus.fetched,
        UrlStatus.skipped,
        UrlStatus.failed,
        UrlStatus.skipped,
        UrlStatus.fetched,
    ]
    assert outcome.fetch.summary() == "q1: 2 fetched, 0 from store, 2 skipped, 1 failed"
    boiling = outcome.fetch.items[0].page
    assert boiling is not None and boiling.published == "2024-03-05" and "Pressure cookers" in boiling.text
    details = [error.detail for error in outcome.errors]
    assert all(error.run_id == "run-1" and error.subquestion_id == "q1" for error in outcome.errors)
    assert any("robots.txt" in d for d in details) and any("not text" in d for d in details)
    assert web.forbidden.connections == 0 and web.canary.connections == 0


def test_all_providers_failing_is_an_honest_no_sources_outcome(web: Site) -> None:
    with LoopbackServer(failing_routes()) as broken:
        settings = settings_for(
            searxng_url=broken.url(""), wikipedia_url=broken.url(""), provider_order=("wikipedia",)
        )
        fetcher = Fetcher(settings)
        research = WebResearch(
            "run-2", make_searcher("searxng", settings, BreakerBoard()), FetchSession(fetcher)
        )
        outcome = research.research(SubQuestion(id="q2", position=1, text="?", query="anything"), limit=4)
        research.close()
    assert outcome.results == [] and outcome.fetch.items == [] and outcome.provider is None
    details = [error.detail for error in outcome.errors]
    assert len(details) == 3 and details[-1].startswith("no sources: no search provider returned results")
    assert outcome.fetch.summary() == "q2: 0 fetched, 0 from store, 0 skipped, 0 failed"
