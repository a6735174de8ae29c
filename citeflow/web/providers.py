"""Search providers behind citeflow.search.Searcher, and the fallback chain a run searches through.

Every provider returns SearchResult rows (url, title, snippet, provider, rank from 1). A
provider that fails for a reason outside our code (network, HTTP status, a malformed answer)
raises FetchError; FallbackSearch turns that into a recorded failure and asks the next provider.
Programming errors are not caught: they should stop the run, not look like "no results".
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast
from urllib.parse import quote

import httpx
from ddgs import DDGS
from ddgs.exceptions import DDGSException
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from citeflow.contracts import SearchResult
from citeflow.errors import FetchError, InputError
from citeflow.search import Searcher
from citeflow.web.breaker import BreakerBoard
from citeflow.web.settings import WebSettings, parse_provider_order

SNIPPET_MAX_CHARS = 500
_TAG = re.compile(r"<[^>]+>")


def _clean(text: str) -> str:
    """Provider snippets may carry highlight markup; keep only the words."""
    return " ".join(html.unescape(_TAG.sub("", text)).split())[:SNIPPET_MAX_CHARS]


def http_client(settings: WebSettings) -> httpx.Client:
    # trust_env=False: a proxy from the environment must not carry search traffic somewhere unseen.
    return httpx.Client(
        timeout=httpx.Timeout(settings.read_timeout, connect=settings.connect_timeout),
        headers={"User-Agent": settings.user_agent},
        follow_redirects=False,
        trust_env=False,
    )


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")  # third-party answers carry many fields we do not use


Answer = TypeVar("Answer", bound=_Lenient)


class _JsonSearch:
    """A provider asked over HTTP through the chain's shared client, answering JSON."""

    name: str

    def __init__(self, base_url: str, client: httpx.Client) -> None:
        self.base_url = base_url.rstrip("/")
        self.client = client

    def _ask(self, request: httpx.Request, model: type[Answer]) -> Answer:
        """The answer, validated; FetchError when the request fails, is refused or is malformed."""
        try:
            response = self.client.send(request)
        except httpx.HTTPError as error:
            raise FetchError(self.name, f"{request.url.copy_with(query=None)} failed: {error!r}") from error
        if response.status_code != 200:
            raise FetchError(self.name, f"{response.request.url} answered HTTP {response.status_code}")
        try:
            return model.model_validate_json(response.content)
        except ValidationError as error:
            raise FetchError(
                self.name, f"unexpected answer format ({error.error_count()} problems)"
            ) from error


class _Hit(_Lenient):
    url: str
    title: str = ""
    content: str = ""


class _ResultsAnswer(_Lenient):
    """SearXNG's and Tavily's answers share this shape: {"results": [{url, title, content}]}."""

    results: list[_Hit] = Field(default_factory=list)

    def ranked(self, provider: str, limit: int) -> list[SearchResult]:
        return [
            SearchResult(
                url=hit.url, title=_clean(hit.title), snippet=_clean(hit.content), provider=provider, rank=i
            )
            for i, hit in enumerate(self.results[:limit], start=1)
        ]


class SearxngSearch(_JsonSearch):
    """A self-hosted SearXNG instance, JSON output (the instance must enable `format=json`)."""

    name = "searxng"

    def search(self, query: str, limit: int) -> list[SearchResult]:
        request = self.client.build_request(
            "GET", f"{self.base_url}/search", params={"q": query, "format": "json"}
        )
        return self._ask(request, _ResultsAnswer).ranked(self.name, limit)


class _WikiHit(_Lenient):
    title: str
    snippet: str = ""


class _WikiQuery(_Lenient):
    search: list[_WikiHit] = Field(default_factory=list)


class _WikiAnswer(_Lenient):
    query: _WikiQuery = Field(default_factory=_WikiQuery)


class WikipediaSearch(_JsonSearch):
    """Full-text search of a MediaWiki site through its action API (list=search)."""

    name = "wikipedia"

    def search(self, query: str, limit: int) -> list[SearchResult]:
        params = {
            "action": "query",
            "list": "search",
            "srsearch": query,
            "srlimit": str(limit),
            "format": "json",
            "formatversion": "2",
        }
        request = self.client.build_request("GET", f"{self.base_url}/w/api.php", params=params)
        answer = self._ask(request, _WikiAnswer)
        return [
            SearchResult(
                url=f"{self.base_url}/wiki/{quote(hit.title.replace(' ', '_'), safe='')}",
                title=hit.title,
                snippet=_clean(hit.snippet),
                provider=self.name,
                rank=i,
            )
            for i, hit in enumerate(answer.query.search[:limit], start=1)
        ]


class TavilySearch(_JsonSearch):
    name = "tavily"

    def __init__(self, api_key: str, base_url: str, client: httpx.Client) -> None:
        super().__init__(base_url, client)
        self._api_key = api_key

    def search(self, query: str, limit: int) -> list[SearchResult]:
        request = self.client.build_request(
            "POST",
            f"{self.base_url}/search",
            json={"query": query, "max_results": limit, "search_depth": "basic"},
            headers={"Authorization": f"Bearer {self._api_key}"},
        )
        return self._ask(request, _ResultsAnswer).ranked(self.name, limit)


class DuckDuckGoSearch:
    """DuckDuckGo through the ddgs package (no key). ddgs does its own HTTP; only its timeout is ours."""

    name = "duckduckgo"

    def __init__(self, timeout: float) -> None:
        self._ddgs = DDGS(timeout=max(1, round(timeout)))

    def search(self, query: str, limit: int) -> list[SearchResult]:
        try:
            hits = self._ddgs.text(query, max_results=limit, backend="duckduckgo")
        except DDGSException as error:
            # ddgs raises the same exception for "nothing matched" and for real failures.
            if str(error) == "No results found.":
                return []
            raise FetchError(self.name, f"search failed: {error}") from error
        return [
            SearchResult(
                url=str(hit.get("href", "")),
                title=_clean(str(hit.get("title", ""))),
                snippet=_clean(str(hit.get("body", ""))),
                provider=self.name,
                rank=i,
            )
            for i, hit in enumerate(hits[:limit], start=1)
            if hit.get("href")
        ]


class SearchReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    results: list[SearchResult]
    provider: str | None = Field(description="The provider whose results these are; None when none had any.")
    failures: list[str] = Field(default_factory=list, description="One line per provider failed or skipped.")


class FallbackSearch:
    """Tries providers in order: a failing or empty provider hands over to the next one, and a
    provider whose breaker is open is skipped without being asked."""

    def __init__(
        self, providers: Sequence[Searcher], breakers: BreakerBoard, client: httpx.Client | None = None
    ) -> None:
        if not providers:
            raise InputError("search providers", "none is configured", "no search was made")
        self.providers = list(providers)
        self.breakers = breakers
        self.name = ">".join(provider.name for provider in self.providers)
        self._client = client  # shared by the HTTP providers; closed with the chain

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def search(self, query: str, limit: int) -> list[SearchResult]:
        return self.search_report(query, limit).results

    def search_report(self, query: str, limit: int) -> SearchReport:
        failures: list[str] = []
        for provider in self.providers:
            if self.breakers.is_open(provider.name):
                left = self.breakers.seconds_left(provider.name)
                failures.append(
                    f"search provider {provider.name} skipped: circuit breaker open "
                    f"after {self.breakers.threshold} consecutive failures ({left:.0f} s left)"
                )
                continue
            try:
                results = provider.search(query, limit)
            except FetchError as error:
                opened = self.breakers.record_failure(provider.name)
                note = (
                    f"; circuit breaker opened: skipped for {self.breakers.cooldown:.0f} s" if opened else ""
                )
                failures.append(f"search provider {provider.name} failed: {error}{note}")
                continue
            self.breakers.record_success(provider.name)
            if results:
                return SearchReport(results=results[:limit], provider=provider.name, failures=failures)
        return SearchReport(results=[], provider=None, failures=failures)


@dataclass(frozen=True)
class Provider:
    """One search provider as a run may use it: what it needs before it can be asked (`missing` says
    what is not configured, or None), and how to make it (`make`; None for `local`, the evidence
    store's search, which the caller hands in)."""

    missing: Callable[[WebSettings, bool], str | None]  # (settings, local_available) -> what is missing
    make: Callable[[WebSettings, httpx.Client], Searcher] | None


# Every provider, by the name --search, the topics and CITEFLOW_PROVIDER_ORDER give it: adding one is a
# class above and a row here (and its name in citeflow.web.settings.PROVIDER_NAMES, which validates
# settings without importing the clients).
PROVIDERS: dict[str, Provider] = {
    "duckduckgo": Provider(
        missing=lambda settings, local: None,
        make=lambda settings, client: DuckDuckGoSearch(settings.read_timeout),
    ),
    "wikipedia": Provider(
        missing=lambda settings, local: None,
        make=lambda settings, client: WikipediaSearch(settings.wikipedia_url, client),
    ),
    "searxng": Provider(
        missing=lambda settings, local: "SEARXNG_URL" if settings.searxng_url is None else None,
        make=lambda settings, client: SearxngSearch(str(settings.searxng_url), client),
    ),
    "tavily": Provider(
        missing=lambda settings, local: settings.tavily_key_env if settings.tavily_api_key is None else None,
        make=lambda settings, client: TavilySearch(str(settings.tavily_api_key), settings.tavily_url, client),
    ),
    "local": Provider(missing=lambda settings, local: None if local else "an evidence store", make=None),
}


def provider_chain(
    settings: WebSettings,
    chosen: str | Sequence[str] | None,
    local_available: bool = False,
) -> list[str]:
    """The chosen provider(s) first, then the default order, each once; `local` alone
    stays alone. `chosen` may be one comma-separated string (`"wikipedia, local"`), as typed.

    A chosen provider that is not configured is an InputError; an unconfigured one further down
    the order is left out.
    """
    # Names as typed carry spaces and capitals; trim and lower-case them the same way in both forms.
    first = list(parse_provider_order(chosen if isinstance(chosen, str) else ",".join(chosen or [])))
    unknown = [name for name in first if name not in PROVIDERS]
    if unknown:
        raise InputError("--search", f"unknown provider {unknown[0]!r}; known: {', '.join(PROVIDERS)}")
    needs = {name: provider.missing(settings, local_available) for name, provider in PROVIDERS.items()}
    for name in first:
        if needs.get(name):
            raise InputError("--search", f"{name} needs {needs[name]}", "no search was made")
    if first == ["local"]:
        # The embedded default stays offline: the store never falls back to the web.
        return first
    rest = settings.provider_order
    chain: list[str] = []
    for name in [*first, *rest]:
        if name not in chain and not needs.get(name):
            chain.append(name)
    return chain


def make_searcher(
    names: str | Sequence[str] | None,
    settings: WebSettings,
    breakers: BreakerBoard,
    local: Searcher | None = None,
) -> FallbackSearch:
    """A fallback chain starting with `names`; `local` is the search over the evidence store
    (storage.search.LocalSearch), which the chain can only include when it is given."""
    client = http_client(settings)
    providers: list[Searcher] = []
    for name in provider_chain(settings, names, local_available=local is not None):
        make = PROVIDERS[name].make  # the chain holds only providers with nothing missing
        providers.append(make(settings, client) if make is not None else cast(Searcher, local))
    return FallbackSearch(providers, breakers, client)
