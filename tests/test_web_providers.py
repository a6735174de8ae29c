"""Search providers against loopback servers in their real answer formats, and the fallback chain."""

from __future__ import annotations

import pytest
from web_servers import LoopbackServer, Reply, failing_routes, mediawiki_routes, searxng_routes, tavily_routes

from citeflow.contracts import SearchResult
from citeflow.errors import FetchError, InputError
from citeflow.web.breaker import BreakerBoard
from citeflow.web.providers import (
    DuckDuckGoSearch,
    FallbackSearch,
    SearxngSearch,
    http_client,
    make_searcher,
    provider_chain,
)
from citeflow.web.settings import WebSettings

HITS = [
    {
        "url": "https://a.example/boiling",
        "title": "Boiling <b>point</b>",
        "content": "Water boils at 100 &amp; up",
    },
    {"url": "https://b.example/tea", "title": "Tea", "content": "Green tea"},
    {"url": "https://c.example/salt", "title": "Salt", "content": "Salt raises it"},
]


def test_searxng_json_results_become_ranked_search_results() -> None:
    with LoopbackServer(searxng_routes(HITS)) as server:
        searcher = make_searcher("searxng", WebSettings(searxng_url=server.url("")), BreakerBoard())
        results = searcher.search("boiling point", 2)
        searcher.close()
    assert [(r.url, r.rank, r.provider) for r in results] == [
        ("https://a.example/boiling", 1, "searxng"),
        ("https://b.example/tea", 2, "searxng"),
    ]
    assert results[0].title == "Boiling point" and results[0].snippet == "Water boils at 100 & up"
    assert server.requests[0].query == {"q": ["boiling point"], "format": ["json"]}


def test_wikipedia_search_uses_the_mediawiki_api_and_builds_article_urls() -> None:
    titles = [("Boiling point", 'The <span class="searchmatch">boiling</span> point'), ("Tea (drink)", "")]
    with LoopbackServer(mediawiki_routes(titles)) as server:
        settings = WebSettings(wikipedia_url=server.url(""))
        searcher = make_searcher("wikipedia", settings, BreakerBoard())
        results = searcher.search("boiling", 5)
        searcher.close()
    assert [r.url for r in results] == [
        server.url("/wiki/Boiling_point"),
        server.url("/wiki/Tea_%28drink%29"),
    ]
    assert results[0].snippet == "The boiling point"
    query = server.requests[0].query
    assert query["action"] == ["query"] and query["list"] == ["search"] and query["srlimit"] == ["5"]


def test_tavily_sends_the_key_and_reads_results() -> None:
    with LoopbackServer(tavily_routes("tvly-test", HITS)) as server:
        good = WebSettings(tavily_url=server.url(""), tavily_api_key="tvly-test")
        results = make_searcher("tavily", good, BreakerBoard()).search("tea", 3)
        assert [r.rank for r in results] == [1, 2, 3] and results[1].provider == "tavily"
        bad = WebSettings(tavily_url=server.url(""), tavily_api_key="wrong", provider_order=("tavily",))
        report = make_searcher("tavily", bad, BreakerBoard()).search_report("tea", 3)
    assert report.results == [] and report.provider is None
    assert "HTTP 401" in report.failures[0]


def test_duckduckgo_provider_is_constructed_with_our_timeout() -> None:
    # The real service is unreachable from the test machine; only construction is checked here.
    searcher = DuckDuckGoSearch(timeout=7.0)
    assert searcher.name == "duckduckgo" and searcher._ddgs._timeout == 7


def test_failing_provider_trips_its_breaker_and_the_next_provider_answers() -> None:
    now = [0.0]
    board = BreakerBoard(threshold=5, cooldown=60, clock=lambda: now[0])
    with LoopbackServer(failing_routes()) as broken, LoopbackServer(searxng_routes(HITS)) as good:
        flaky = SearxngSearch(broken.url(""), http_client(WebSettings()))
        flaky.name = "flaky"
        chain = FallbackSearch([flaky, SearxngSearch(good.url(""), flaky.client)], board)
        reports = [chain.search_report("q", 3) for _ in range(7)]
        assert broken.connections == 5  # the 6th and 7th searches never reached it
        now[0] += 61
        chain.search_report("q", 3)
        assert broken.connections == 6  # after the cooldown it is tried once more
    assert all(report.provider == "searxng" and len(report.results) == 3 for report in reports)
    assert "HTTP 500" in reports[0].failures[0] and "breaker" not in reports[0].failures[0]
    assert "circuit breaker opened: skipped for 60 s" in reports[4].failures[0]
    assert "skipped: circuit breaker open after 5 consecutive failures" in reports[5].failures[0]


def test_all_providers_failing_gives_no_results_and_a_failure_each() -> None:
    with LoopbackServer(failing_routes()) as broken:
        settings = WebSettings(
            searxng_url=broken.url(""), wikipedia_url=broken.url(""), provider_order=("wikipedia",)
        )
        report = make_searcher("searxng", settings, BreakerBoard()).search_report("q", 3)
    assert report.results == [] and report.provider is None
    assert [line.split(" failed")[0] for line in report.failures] == [
        "search provider searxng",
        "search provider wikipedia",
    ]


def test_unreachable_provider_is_a_recorded_failure_not_a_crash() -> None:
    with LoopbackServer() as server:
        dead_url = server.url("")  # closed once the block ends: nothing listens there
    settings = WebSettings(searxng_url=dead_url, provider_order=("searxng",))
    report = make_searcher("searxng", settings, BreakerBoard()).search_report("q", 3)
    assert report.results == [] and "ConnectError" in report.failures[0]


def test_malformed_answer_is_a_provider_failure() -> None:
    routes = {
        "/search": lambda _: Reply(headers={"Content-Type": "application/json"}, body=b'{"results": 5}')
    }
    with LoopbackServer(routes) as server:
        searcher = SearxngSearch(server.url(""), http_client(WebSettings()))
        with pytest.raises(FetchError, match="unexpected answer format"):
            searcher.search("q", 3)


def test_provider_chain_order_and_configuration_errors() -> None:
    settings = WebSettings(
        searxng_url="http://127.0.0.1:1",
        provider_order=("duckduckgo", "searxng", "wikipedia", "tavily", "local"),
    )
    assert provider_chain(settings, "searxng") == ["searxng", "duckduckgo", "wikipedia"]  # no key, no store
    assert provider_chain(settings, None, local_available=True) == [
        "duckduckgo",
        "searxng",
        "wikipedia",
        "local",
    ]
    assert provider_chain(settings, ["wikipedia", "searxng"]) == [
        "wikipedia",
        "searxng",
        "duckduckgo",
    ]
    with pytest.raises(InputError, match="tavily needs TAVILY_API_KEY"):
        provider_chain(settings, "tavily")
    with pytest.raises(InputError, match="SEARXNG_URL"):
        provider_chain(WebSettings(), "searxng")
    with pytest.raises(InputError, match="local needs an evidence store"):
        provider_chain(settings, "local")
    with pytest.raises(InputError, match="unknown provider 'bing'"):
        provider_chain(settings, "bing")


def test_provider_chain_reads_a_comma_separated_choice_as_typed() -> None:
    settings = WebSettings(provider_order=("duckduckgo", "wikipedia", "local"))
    expected = ["wikipedia", "local", "duckduckgo"]
    assert provider_chain(settings, "wikipedia, local", local_available=True) == expected
    assert provider_chain(settings, " Wikipedia ,LOCAL,", local_available=True) == expected
    assert provider_chain(settings, ["wikipedia", " local"], local_available=True) == expected
    assert provider_chain(settings, " local ", local_available=True) == ["local"]  # local alone stays alone
    with pytest.raises(InputError, match="unknown provider 'bing'"):
        provider_chain(settings, "wikipedia, bing")


def test_every_provider_a_setting_may_name_is_one_row_of_the_registry() -> None:
    from citeflow.web.providers import PROVIDERS
    from citeflow.web.settings import PROVIDER_NAMES

    assert tuple(PROVIDERS) == PROVIDER_NAMES
    settings = WebSettings(searxng_url="http://127.0.0.1:1", tavily_api_key="tvly-test")

    class StoreSearch:  # stands for storage.search.LocalSearch, which the caller hands in
        name = "local"

        def search(self, query: str, limit: int) -> list[SearchResult]:
            return []

    local = StoreSearch()
    chain = make_searcher(",".join(PROVIDER_NAMES), settings, BreakerBoard(), local=local)
    # Each named provider, in the order given, built from its row; `local` is the searcher handed in.
    assert [provider.name for provider in chain.providers] == list(PROVIDER_NAMES)
    assert chain.providers[-1] is local
