"""Issue 5, end to end: `citeflow run QUESTION --search searxng` against a SearXNG-format server on
loopback fetches, extracts and cites real HTML pages, through the real Prefect flow and the CLI.

Every server is a real HTTP server on 127.0.0.1; settings come from the environment, as a user sets
them. Every test runs inside `outbound()`, which refuses and lists any connection or DNS lookup
beyond loopback, and CITEFLOW_PROVIDER_ORDER=searxng keeps duckduckgo and wikipedia (public web,
and ddgs connects natively where the watch cannot see) out of every chain.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from typer.testing import CliRunner
from web_servers import LoopbackServer, Site, failing_routes, outbound, running_site, searxng_routes

from citeflow.config import load_settings
from citeflow.contracts import Report, RunStatus
from citeflow.errors import InputError
from citeflow.text import normalise
from citeflow.web.providers import provider_chain
from storage.store import EvidenceStore, get_store
from tasks.audit import audit
from tasks.finish import slug

QUESTION = "Why does water boil at a lower temperature in Denver than at sea level?"
PAGES = {  # path -> (title, published), as the pages declare them
    "/articles/boiling.html": ("Why water boils at different temperatures", "2024-03-05"),
    "/articles/altitude.html": ("Cooking at high altitude", "2021-09-14"),
    "/articles/tea.html": ("Green and black tea", "2023-11-20"),
}
ROBOTS_DISALLOWED = "/private/secret.html"
BINARY_AS_HTML = "/binary.html"
INWARD_REDIRECT = "/redirect/inward"


@pytest.fixture
def web() -> Iterator[Site]:
    """A fresh site per test, so its connection counts belong to that test alone."""
    with running_site() as site:
        yield site


@pytest.fixture(autouse=True)
def stays_on_loopback() -> Iterator[None]:
    with outbound() as attempts:
        yield
    assert attempts == [], f"a test tried to leave loopback: {attempts}"


def hits(site: LoopbackServer, paths: list[str]) -> list[dict[str, str]]:
    return [{"url": site.url(path), "title": path, "content": f"result for {path}"} for path in paths]


def use_searxng(monkeypatch: pytest.MonkeyPatch, searx: LoopbackServer, *allowed: LoopbackServer) -> None:
    """The environment a user sets: where SearXNG is, which loopback hosts may be fetched, and no
    fallback beyond SearXNG."""
    monkeypatch.setenv("SEARXNG_URL", searx.url(""))
    monkeypatch.setenv("CITEFLOW_ALLOW_HOSTS", ",".join(f"{server.host}:{server.port}" for server in allowed))
    monkeypatch.setenv("CITEFLOW_PROVIDER_ORDER", "searxng")


@contextmanager
def searxng_listing(
    monkeypatch: pytest.MonkeyPatch, site: LoopbackServer, paths: list[str]
) -> Iterator[LoopbackServer]:
    """A SearXNG server answering with `paths` of `site`, set in the environment by `use_searxng`."""
    with LoopbackServer(searxng_routes(hits(site, paths))) as searx:
        use_searxng(monkeypatch, searx, site)
        yield searx


def run_flow(db: Path, reports: Path, question: str = QUESTION, refresh: bool = False) -> Report:
    from flows.research import research_flow

    report = research_flow(
        question=question,
        settings={"search": "searxng", "db": str(db), "reports": str(reports)},
        refresh=refresh,
    )
    assert isinstance(report, Report), report
    return report


def rows(store: EvidenceStore, sql: str) -> list[dict[str, Any]]:
    columns, values = store.query(sql)
    return [dict(zip(columns, row, strict=True)) for row in values]


async def _read_artifacts(run_id: str) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as client:
        return await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(run_id)]))
        )


def run_artifacts(run_id: str) -> dict[str, Any]:
    """The artifacts a run published on the Prefect server, by key."""
    return {artifact.key: artifact for artifact in asyncio.run(_read_artifacts(run_id)) if artifact.key}


def research_table(report: Report) -> dict[str, dict[str, int]]:
    """The research artifact as the Prefect UI shows it: URL counts per sub-question."""
    artifact = run_artifacts(report.run_id)[f"research-{slug(report.question)}"]
    table = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
    return {row.pop("subquestion"): row for row in table}


def test_provider_order_from_the_environment_keeps_a_searxng_run_off_the_public_web() -> None:
    env = {"SEARXNG_URL": "http://127.0.0.1:9"}
    default = provider_chain(load_settings(None, None, env).settings.web, "searxng", local_available=True)
    assert default[0] == "searxng" and "duckduckgo" in default  # why the tests set the order
    only = load_settings(None, None, {**env, "CITEFLOW_PROVIDER_ORDER": " SearXNG , "}).settings.web
    assert only.provider_order == ("searxng",)
    assert provider_chain(only, "searxng", local_available=True) == ["searxng"]
    with pytest.raises(InputError, match="unknown search providers"):
        load_settings(None, None, {"CITEFLOW_PROVIDER_ORDER": "searxng,bing"})


def test_searxng_run_cites_real_html_pages_fetched_from_loopback(
    prefect_api: None, web: Site, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    db = tmp_path / "web.duckdb"
    with searxng_listing(monkeypatch, web.site, list(PAGES)) as searx:
        report = run_flow(db, tmp_path / "reports")
        searches = searx.paths()

    store = get_store(db)
    served = {web.site.url(path) for path in PAGES}
    assert report.status in (RunStatus.complete, RunStatus.partial), report.markdown
    assert report.sentences and report.claims
    sources = {source.id: source for source in report.sources}
    for sentence in report.sentences:
        assert sentence.cites and all(sources[cite].url in served for cite in sentence.cites)
    assert audit(store, report) == []
    for claim in report.claims:
        page = store.get_page(claim.page_id)
        assert page.url in served and normalise(claim.quote) in normalise(page.text)
    assert f"## Sources\n\n- [{report.sources[0].id}] " in report.markdown

    pages = {row["url"]: row for row in rows(store, "SELECT url, title, origin, published, text FROM pages")}
    assert set(pages) == served
    for path, (title, published) in PAGES.items():
        row = pages[web.site.url(path)]
        assert (row["origin"], row["title"], row["published"]) == ("fetched", title, published)
        assert "All rights reserved" not in row["text"]  # extraction kept the article, not the chrome
    assert "Mount Everest" in pages[web.site.url("/articles/altitude.html")]["text"]

    subquestions = store.subquestions(report.run_id)
    results = rows(store, f"SELECT provider, url FROM search_results WHERE run_id = '{report.run_id}'")
    assert {row["provider"] for row in results} == {"searxng"}
    assert len(results) == len(subquestions) * len(PAGES) and {row["url"] for row in results} == served
    assert searches == ["/search"] * len(subquestions)
    assert all(web.site.paths().count(path) == 1 for path in PAGES)  # one fetch per page per run
    traces = rows(store, f"SELECT actor FROM traces WHERE run_id = '{report.run_id}' AND stage = 'research'")
    assert [row["actor"] for row in traces] == ["searxng"] * len(subquestions)


def test_cli_run_with_searxng_prints_json_citing_the_loopback_pages(
    prefect_api: None, web: Site, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from cli.main import app

    db = tmp_path / "cli.duckdb"
    with searxng_listing(monkeypatch, web.site, list(PAGES)):
        result = CliRunner().invoke(
            app,
            ["run", QUESTION, "--search", "searxng", "--db", str(db), "--reports", str(tmp_path), "--json"],
        )

    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    served = {web.site.url(path) for path in PAGES}
    urls = {source["id"]: source["url"] for source in payload["sources"]}
    assert urls and set(urls.values()) <= served
    assert payload["sentences"] and all(
        sentence["cites"] and set(sentence["cites"]) <= set(urls) for sentence in payload["sentences"]
    )
    store = get_store(db)
    assert payload["claims"]
    for claim in payload["claims"]:
        assert claim["source"] in urls, claim  # every claim cites a listed source
        page = store.latest_page(urls[claim["source"]])
        assert page is not None and normalise(claim["quote"]) in normalise(page.text)
    assert all(store.latest_page(url) is not None for url in urls.values())
    assert Path(payload["report_path"]).read_text(encoding="utf-8") == payload["report"]


def test_progress_shows_skipped_and_failed_urls_and_the_report_says_why(
    prefect_api: None, web: Site, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    good = ["/articles/boiling.html", "/articles/altitude.html"]
    listed = [good[0], ROBOTS_DISALLOWED, BINARY_AS_HTML, good[1]]
    question = "How does altitude change the temperature at which water boils in Denver?"
    with searxng_listing(monkeypatch, web.site, listed):
        report = run_flow(tmp_path / "progress.duckdb", tmp_path / "reports", question)

    artifacts = run_artifacts(report.run_id)
    key = slug(question)
    assert {f"research-{key}", f"progress-{key}", f"report-{key}", f"sources-{key}"} <= set(artifacts)
    assert artifacts[f"progress-{key}"].type == "progress" and artifacts[f"progress-{key}"].data == 100.0
    table = research_table(report)
    store = get_store(tmp_path / "progress.duckdb")
    assert set(table) == {sub.id for sub in store.subquestions(report.run_id)}
    for counts in table.values():
        assert (counts["skipped"], counts["failed"], counts["stored"]) == (1, 1, 0)
        assert counts["fetched"] + counts["shared"] == len(good)
    assert sum(counts["fetched"] for counts in table.values()) == len(good)  # each page fetched once
    assert web.site.paths().count(ROBOTS_DISALLOWED) == 0  # robots.txt said no: never requested

    robots = [c for c in report.caveats if "robots.txt disallows" in c and ROBOTS_DISALLOWED in c]
    binary = [c for c in report.caveats if "not text" in c and BINARY_AS_HTML in c]
    assert robots and binary, report.caveats
    assert "## Caveats" in report.markdown and ROBOTS_DISALLOWED in report.markdown
    assert report.status is RunStatus.partial and audit(store, report) == []
    assert {web.site.url(path) for path in good} >= {source.url for source in report.sources}


def test_all_providers_failing_ends_in_an_honest_no_sources_report(
    prefect_api: None, web: Site, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from prefect.states import State

    from flows.research import report_of, research_flow

    db = tmp_path / "failed.duckdb"
    with LoopbackServer(failing_routes()) as broken:
        use_searxng(monkeypatch, broken, web.site)
        web_settings = load_settings().settings.web
        assert provider_chain(web_settings, "searxng", local_available=True) == ["searxng"]
        state = research_flow(
            question=QUESTION,
            settings={"search": "searxng", "db": str(db), "reports": str(tmp_path / "reports")},
            return_state=True,
        )
        searches = broken.paths()

    assert isinstance(state, State) and state.is_failed()
    report = report_of(state)
    assert isinstance(report, Report) and report.status is RunStatus.failed
    assert report.sentences == [] and report.sources == [] and report.claims == []
    assert "No report could be written" in report.markdown
    store = get_store(db)
    subquestions = store.subquestions(report.run_id)
    assert searches == ["/search"] * len(subquestions)  # SearXNG was asked, once per sub-question
    details = [error.detail for error in store.errors(report.run_id)]
    assert sum("search provider searxng failed" in d and "HTTP 500" in d for d in details) == len(
        subquestions
    )
    assert sum(d.startswith("no sources: no search provider returned results") for d in details) == len(
        subquestions
    )
    assert any("HTTP 500" in caveat for caveat in report.caveats)
    assert rows(store, "SELECT count(*) AS n FROM pages") == [{"n": 0}]  # nothing invented, nothing read
    assert store.run_sources(report.run_id) == []
    assert web.site.connections == 0


def test_second_run_within_the_freshness_window_reads_pages_from_the_store(
    prefect_api: None, web: Site, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    db, reports = tmp_path / "fresh.duckdb", tmp_path / "reports"
    with searxng_listing(monkeypatch, web.site, list(PAGES)) as searx:
        first = run_flow(db, reports)
        connections, requests = web.site.connections, len(web.site.requests)
        searches = len(searx.paths())
        cached = run_flow(db, reports)  # the research stage's cached result: not even a search
        searched_again = len(searx.paths())
        second = run_flow(db, reports, refresh=True)  # searched again; the pages are fresh in the store

    assert searched_again == searches and len(searx.paths()) > searches
    assert research_table(cached) == research_table(first)
    assert requests == len(PAGES) + 1  # the pages and robots.txt, once
    assert web.site.connections == connections and len(web.site.requests) == requests  # 0 new fetches
    store = get_store(db)
    assert rows(store, "SELECT count(*) AS n FROM pages") == [{"n": len(PAGES)}]
    table = research_table(second)
    assert all(
        counts["stored"] == len(PAGES) and counts["fetched"] == counts["shared"] == 0
        for counts in table.values()
    )
    assert second.sentences and audit(store, second) == []
    assert {source.url for source in second.sources} == {source.url for source in first.sources}


def test_redirect_to_a_loopback_port_off_the_allowlist_is_skipped_unconnected(
    prefect_api: None, web: Site, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    listed = ["/articles/boiling.html", INWARD_REDIRECT]
    with searxng_listing(monkeypatch, web.site, listed):  # web.forbidden is not allowed
        report = run_flow(tmp_path / "redirect.duckdb", tmp_path / "reports")

    assert web.forbidden.connections == 0 and web.canary.connections == 0
    assert web.site.paths().count(INWARD_REDIRECT) == 1  # asked once, its Location refused
    for counts in research_table(report).values():
        assert counts["skipped"] == 1 and counts["failed"] == 0
    store = get_store(tmp_path / "redirect.duckdb")
    inward = [
        error.detail
        for error in store.errors(report.run_id)
        if error.detail.startswith("skipped:") and "redirect hop 1" in error.detail
    ]
    assert inward and all(f"127.0.0.1:{web.forbidden.port}" in detail for detail in inward)
    assert any("redirect hop 1" in caveat for caveat in report.caveats)
    assert {source.url for source in report.sources} == {web.site.url("/articles/boiling.html")}
    assert audit(store, report) == []
