"""Fetch throughput and extracted size on the loopback test site (tests/web_servers.py).

    .venv/bin/python benchmarks/web_fetch.py [--rounds 40] [--threads 4]
    .venv/bin/python benchmarks/web_fetch.py --flow [--hosts 3] [--runs 3]

The first form measures the fetcher alone: pages fetched per second (network, robots.txt check,
extraction; politeness delay 0) and extracted characters per page, per test page and overall.

`--flow` measures the whole research flow as `citeflow run Q --search searxng` runs it: a SearXNG-
format server on loopback lists the test pages, spread over `--hosts` loopback addresses (127.0.0.1,
127.0.0.2, ...), and each run (a fresh store, so nothing is read from it) fetches, extracts, verifies
and cites them with the default politeness: at most 2 requests in flight and starts 1 s apart per
host. It prints pages fetched per second of the research stage and extracted characters per page.

Loopback only: the figures measure citeflow's own cost, not the internet's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from web_servers import LoopbackServer, running_site, searxng_routes  # noqa: E402

from citeflow.web.fetcher import Fetcher  # noqa: E402
from citeflow.web.settings import WebSettings  # noqa: E402

PAGES = [
    "/articles/boiling.html",
    "/articles/tea.html",
    "/articles/injection.html",
    "/notes.txt",
    "/paper.pdf",
]
FLOW_PAGES = [*PAGES, "/articles/altitude.html"]
FLOW_QUESTION = "Why does water boil at a lower temperature in Denver than at sea level?"


def fetcher_figures(rounds: int, threads: int) -> None:
    with running_site() as web:
        settings = WebSettings(
            per_domain_delay=0,
            per_domain_concurrency=threads,
            allow_hosts=frozenset({web.site.host_port}),
        )
        urls = [web.site.url(path) for path in PAGES] * rounds
        with Fetcher(settings) as fetcher:
            fetcher.fetch(urls[0])  # warm up: robots.txt and imports are not what is measured
            started = time.perf_counter()
            with ThreadPoolExecutor(max_workers=threads) as pool:
                pages = list(pool.map(fetcher.fetch, urls))
            elapsed = time.perf_counter() - started
    rate = len(pages) / elapsed
    print(f"{len(pages)} fetches in {elapsed:.2f} s with {threads} threads: {rate:.1f} pages/s")
    for path in PAGES:
        sizes = [len(page.text) for page in pages if page.url.endswith(path)]
        print(f"  {path:28} {statistics.mean(sizes):7.0f} extracted chars/page")
    print(f"  {'all pages':28} {statistics.mean(len(page.text) for page in pages):7.0f} extracted chars/page")


def flow_figures(hosts: int, runs: int) -> None:
    from citeflow.prefect_env import apply_prefect_defaults

    apply_prefect_defaults()  # before Prefect is imported, as the CLI does
    from citeflow.contracts import Report
    from flows.research import report_of, research_flow
    from storage.store import get_store
    from tasks.audit import audit

    with ExitStack() as stack:
        sites = [stack.enter_context(running_site(f"127.0.0.{n}")) for n in range(1, hosts + 1)]
        hits = [
            {"url": sites[i % hosts].site.url(path), "title": path, "content": ""}
            for i, path in enumerate(FLOW_PAGES)
        ]
        searx = stack.enter_context(LoopbackServer(searxng_routes(hits)))
        os.environ["SEARXNG_URL"] = searx.url("")
        os.environ["CITEFLOW_ALLOW_HOSTS"] = ",".join(f"{s.site.host}:{s.site.port}" for s in sites)
        os.environ["CITEFLOW_PROVIDER_ORDER"] = "searxng"  # never the public web
        os.environ["CITEFLOW_CAPS__PAGES_PER_SEARCH"] = str(len(FLOW_PAGES))  # read every listed page
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        rates, sizes = [], []
        for run in range(1, runs + 1):
            db = tmp / f"run{run}.duckdb"
            chosen = {"search": "searxng", "db": str(db), "reports": str(tmp)}
            state = research_flow(question=FLOW_QUESTION, settings=chosen, return_state=True)
            report = report_of(state)
            if not isinstance(report, Report):
                raise SystemExit(f"run {run} crashed: {state.message}")
            store = get_store(db)
            texts = [row[0] for row in store.query("SELECT text FROM pages")[1]]
            research = next(stage for stage in report.metrics.stages if stage.stage == "research")
            rates.append(len(texts) / research.wall_seconds)
            sizes += [len(text) for text in texts]
            print(
                f"run {run}: {len(texts)} pages fetched in a {research.wall_seconds:.2f} s research stage "
                f"({rates[-1]:.2f} pages/s), whole run {report.metrics.wall_seconds:.2f} s, "
                f"{len(report.sources)} sources cited, audit problems {len(audit(store, report))}"
            )
        canary = sum(site.canary.connections + site.forbidden.connections for site in sites)
    print(f"{hosts} host(s), {runs} runs: {statistics.mean(rates):.2f} pages/s through the research stage")
    print(f"  {statistics.mean(sizes):.0f} extracted chars/page (min {min(sizes)}, max {max(sizes)})")
    print(f"  connections to the canary and forbidden servers: {canary}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="Times each page is fetched.")
    parser.add_argument("--threads", type=int, default=4, help="Fetches in flight at once.")
    parser.add_argument("--flow", action="store_true", help="Measure the whole research flow instead.")
    parser.add_argument("--hosts", type=int, default=1, help="--flow: loopback hosts the pages are on.")
    parser.add_argument("--runs", type=int, default=3, help="--flow: flow runs, each with a fresh store.")
    args = parser.parse_args()
    if args.flow:
        flow_figures(args.hosts, args.runs)
    else:
        fetcher_figures(args.rounds, args.threads)


if __name__ == "__main__":
    main()
