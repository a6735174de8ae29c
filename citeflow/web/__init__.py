"""Web research: search providers with fallback, and a guarded, capped, polite page fetcher.

The researcher stage needs two things per run and one call per sub-question:

    research = open_research(run_id, "searxng", WebSettings.from_env(), store=store)
    outcome = research.research(subquestion, limit=caps.pages_per_search)
    # store outcome.fetch.items[*].page with store.put_page, record outcome.results and
    # outcome.errors, print outcome.fetch.summary(); research.close() when the run ends.
"""

from citeflow.web.fetcher import Fetcher
from citeflow.web.guard import FetchRefused, Guard
from citeflow.web.providers import FallbackSearch, SearchReport, make_searcher
from citeflow.web.research import (
    FetchOutcome,
    FetchSession,
    ResearchOutcome,
    UrlOutcome,
    UrlStatus,
    WebResearch,
    open_research,
)
from citeflow.web.settings import WebSettings

__all__ = [
    "FallbackSearch",
    "FetchOutcome",
    "FetchRefused",
    "FetchSession",
    "Fetcher",
    "Guard",
    "ResearchOutcome",
    "SearchReport",
    "UrlOutcome",
    "UrlStatus",
    "WebResearch",
    "WebSettings",
    "make_searcher",
    "open_research",
]
