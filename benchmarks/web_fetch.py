"""Fetch throughput and extracted size on the loopback test site (tests/web_servers.py).

    .venv/bin/python benchmarks/web_fetch.py [--rounds 40] [--threads 4]

Prints pages fetched per second (network, robots.txt check, extraction; politeness delay 0) and
extracted characters per page, for each test page and overall. Loopback only: the figures measure
citeflow's own cost, not the internet's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from web_servers import running_site  # noqa: E402

from citeflow.web.fetcher import Fetcher  # noqa: E402
from citeflow.web.settings import WebSettings  # noqa: E402

PAGES = [
    "/articles/boiling.html",
    "/articles/tea.html",
    "/articles/injection.html",
    "/notes.txt",
    "/paper.pdf",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="Times each page is fetched.")
    parser.add_argument("--threads", type=int, default=4, help="Fetches in flight at once.")
    args = parser.parse_args()
    with running_site() as web:
        settings = WebSettings(
            per_domain_delay=0,
            per_domain_concurrency=args.threads,
            allow_hosts=frozenset({web.site.host_port}),
        )
        urls = [web.site.url(path) for path in PAGES] * args.rounds
        with Fetcher(settings) as fetcher:
            fetcher.fetch(urls[0])  # warm up: robots.txt and imports are not what is measured
            started = time.perf_counter()
            with ThreadPoolExecutor(max_workers=args.threads) as pool:
                pages = list(pool.map(fetcher.fetch, urls))
            elapsed = time.perf_counter() - started
    rate = len(pages) / elapsed
    print(f"{len(pages)} fetches in {elapsed:.2f} s with {args.threads} threads: {rate:.1f} pages/s")
    for path in PAGES:
        sizes = [len(page.text) for page in pages if page.url.endswith(path)]
        print(f"  {path:28} {statistics.mean(sizes):7.0f} extracted chars/page")
    print(f"  {'all pages':28} {statistics.mean(len(page.text) for page in pages):7.0f} extracted chars/page")


if __name__ == "__main__":
    main()
