"""Web research: search providers with fallback, and a guarded, capped, polite page fetcher.

The researcher stage needs two things per run and one call per sub-question:

    research = open_research(run_id, "searxng", settings.web, store.latest_page, LocalSearch(store))
    outcome = research.research(subquestion, limit=caps.pages_per_search)
    # store outcome.fetch.items[*].page with store.put_page, record outcome.results and
    # outcome.errors, print outcome.fetch.summary(); research.close() when the run ends.
"""
