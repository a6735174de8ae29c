"""Store scale: ingest, local search, index refresh, a SQL aggregate over many claims, size on disk.

    .venv/bin/python benchmarks/store_scale.py [--pages 100000] [--added 1000] [--claims 1000000]

Generates `pages` pages (JSON Lines, as `citeflow ingest` takes them: 1,000 to 3,000 characters of text
each, mean 2,000, words drawn from a Zipf-distributed vocabulary of 30,000 so that term statistics look like
text), and measures, in a fresh store:
  ingest       parse, store and index them with the calls `citeflow ingest` makes (storage/ingest.py):
               pages per second, and the seconds of each part;
  search       LocalSearch over them (what a run's local researcher calls): p50 and p95 of 100 queries
               of two or three words, ten results each;
  refresh      the search-index refresh after `added` more pages are stored;
  put_page     one page stored as a web researcher stores a fetched page, in the full store;
  aggregate    two `citeflow sql` aggregates over `claims` generated claims (each the median of 5): the
               claims alone (statuses and reasons across all runs), and joined to the pages they quote
               (claims per source host);
  size         the store file after a checkpoint.
`ingest_memory` measures what issue 21 asks of `citeflow ingest` itself: its peak resident memory on a
JSON Lines file of a given size (1 GB in the full benchmark), in a process of its own.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from startup import TreeMemory  # noqa: E402  (benchmarks/, the folder of this script)

from citeflow.contracts import Origin, PageInput  # noqa: E402
from storage.ingest import parse_file  # noqa: E402
from storage.search import LocalSearch, refresh_index  # noqa: E402
from storage.store import EvidenceStore  # noqa: E402

CITEFLOW = Path(sys.executable).parent / "citeflow"

VOCABULARY = 30_000
# Two `citeflow sql` aggregates over every claim of every run: the claims alone, and joined to their pages.
AGGREGATES = {
    "rejection reasons across all runs": """
        SELECT status, reason, count(*) AS claims, count(DISTINCT run_id) AS runs, avg(length(quote)) AS chars
        FROM claims GROUP BY ALL ORDER BY claims DESC
    """,
    "claims per source host, joined to their pages": """
        WITH hosts AS (SELECT id, regexp_extract(canonical_url, '//([^/]+)', 1) AS host FROM pages)
        SELECT h.host, count(*) AS claims, count(DISTINCT c.run_id) AS runs,
               avg(CASE WHEN c.status = 'verified' THEN 1 ELSE 0 END) AS verified_share
        FROM claims c JOIN hosts h ON h.id = c.page_id
        GROUP BY h.host ORDER BY claims DESC LIMIT 20
    """,
}


def percentile(values: list[float], share: float) -> float:
    """The value `share` of the way up the sorted values (nearest rank); NaN when there are none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


@dataclass
class StoreFigures:
    pages: int
    ingest_seconds: float
    parse_seconds: float
    store_seconds: float
    index_seconds: float
    search_ms: list[float] = field(default_factory=list)
    added: int = 0
    refresh_seconds: float = 0.0
    put_page_ms: float = 0.0
    claims: int = 0
    aggregate_ms: dict[str, list[float]] = field(default_factory=dict)
    size_bytes: int = 0

    @property
    def pages_per_second(self) -> float:
        return self.pages / self.ingest_seconds

    def search_percentile(self, share: float) -> float:
        return percentile(self.search_ms, share)

    def aggregate_median_ms(self, name: str) -> float:
        return statistics.median(self.aggregate_ms[name])


class Corpus:
    """Deterministic generated pages: words w0..w29999, drawn with Zipf weights (rank r has weight 1/r)."""

    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.words = [self._word(rank) for rank in range(VOCABULARY)]
        self.cumulative = list(itertools.accumulate(1 / (rank + 1) for rank in range(VOCABULARY)))

    def _word(self, rank: int) -> str:
        letters = "bcdfghjklmnprstvwz"
        vowels = "aeiou"
        word, n = "", rank + 1
        while n:  # distinct pronounceable words, short for frequent ranks as in real text
            n, digit = divmod(n, len(letters) * len(vowels))
            word += letters[digit % len(letters)] + vowels[digit // len(letters)]
        return word

    def text(self, chars: int) -> str:
        words = self.rng.choices(self.words, cum_weights=self.cumulative, k=chars // 6)
        sentences = [" ".join(words[i : i + 14]).capitalize() + "." for i in range(0, len(words), 14)]
        return " ".join(sentences)

    def page(self, n: int) -> dict[str, str]:
        return {
            "url": f"https://site{n % 500}.example/pages/{n}",
            "title": self.text(40).rstrip("."),
            "text": self.text(self.rng.randint(1000, 3000)),
        }

    def write(self, path: Path, first: int, count: int) -> Path:
        with path.open("w", encoding="utf-8") as out:
            for n in range(first, first + count):
                out.write(json.dumps(self.page(n)) + "\n")
        return path

    def queries(self, count: int) -> list[str]:
        """Two or three words: one common (rank 50-2,000), the rest rarer (rank 2,000-20,000)."""
        return [
            " ".join(
                [self.words[self.rng.randint(50, 2000)]]
                + [self.words[self.rng.randint(2000, 20_000)] for _ in range(self.rng.randint(1, 2))]
            )
            for _ in range(count)
        ]


def generate_claims(store: EvidenceStore, count: int) -> None:
    """`count` claims spread over count/100 runs, each quoting 200 characters of a stored page."""
    with store.transaction() as cur:
        (pages,) = cur.execute("SELECT count(*) FROM pages").fetchone()  # type: ignore[misc]
        cur.execute(
            """
            INSERT INTO claims
            SELECT 'run-' || (i // 100), 'C' || (i % 100), 'q' || (i % 5 + 1), p.id, p.content_hash,
                   substr(p.text, 1 + (i % 400), 150), substr(p.text, 1 + (i % 400), 200),
                   i % 400, i % 400 + 200, CASE WHEN i % 4 = 0 THEN 'rejected' ELSE 'verified' END,
                   CASE WHEN i % 4 = 0 THEN 'quote not found in page text' ELSE '' END
            FROM range(?) t(i)
            JOIN (SELECT id, content_hash, text, row_number() OVER (ORDER BY id) - 1 AS n FROM pages) p
              ON p.n = i % ?
            """,
            [count, pages],
        )


def ingest(store: EvidenceStore, jsonl: Path) -> tuple[float, float, float]:
    """Parse, store and index the pages of `jsonl` with the calls `citeflow ingest` makes: the seconds
    of each part."""
    started = time.perf_counter()
    parsed = parse_file(jsonl)
    parse_done = time.perf_counter()
    store.put_pages(parsed)
    store_done = time.perf_counter()
    del parsed
    refresh_index(store)
    return parse_done - started, store_done - parse_done, time.perf_counter() - store_done


def measure(folder: Path, pages: int, added: int, claims: int, searches: int = 100) -> StoreFigures:
    corpus = Corpus()
    folder.mkdir(parents=True, exist_ok=True)
    print(f"generating {pages:,} pages ...", file=sys.stderr, flush=True)
    jsonl = corpus.write(folder / "corpus.jsonl", 0, pages)
    store = EvidenceStore.open(folder / "scale.duckdb")
    try:
        parse_seconds, store_seconds, index_seconds = ingest(store, jsonl)
        figures = StoreFigures(
            pages=pages,
            ingest_seconds=parse_seconds + store_seconds + index_seconds,
            parse_seconds=parse_seconds,
            store_seconds=store_seconds,
            index_seconds=index_seconds,
        )
        print(f"ingested in {figures.ingest_seconds:.1f} s", file=sys.stderr, flush=True)

        local = LocalSearch(store)
        for query in corpus.queries(searches):
            started = time.perf_counter()
            local.search(query, 10)
            figures.search_ms.append((time.perf_counter() - started) * 1000)

        more = parse_file(corpus.write(folder / "added.jsonl", pages, added))
        store.put_pages(more)
        started = time.perf_counter()
        refresh_index(store)
        figures.added, figures.refresh_seconds = added, time.perf_counter() - started

        timings = []
        for n in range(10):
            page = PageInput(url=f"https://fetched.example/{n}", title="A fetched page",
                             text=corpus.text(8000), origin=Origin.fetched)  # fmt: skip
            started = time.perf_counter()
            store.put_page(page)
            timings.append(time.perf_counter() - started)
        figures.put_page_ms = statistics.median(timings) * 1000

        generate_claims(store, claims)
        figures.claims = claims
        for name, sql in AGGREGATES.items():
            for _ in range(5):
                started = time.perf_counter()
                store.query(sql)
                figures.aggregate_ms.setdefault(name, []).append((time.perf_counter() - started) * 1000)

        with store.cursor() as cur:
            cur.execute("CHECKPOINT")
    finally:
        store.close()
    figures.size_bytes = sum(path.stat().st_size for path in folder.glob("scale.duckdb*"))
    return figures


@dataclass
class IngestMemory:
    file_bytes: int
    pages: int
    seconds: float
    peak_mb: float  # resident memory of the `citeflow ingest` process at its highest


def ingest_memory(folder: Path, file_bytes: int) -> IngestMemory:
    """`citeflow ingest` of a generated JSON Lines file of at least `file_bytes` bytes into a new store,
    run as a user runs it, its resident memory sampled every 0.1 s."""
    folder.mkdir(parents=True, exist_ok=True)
    jsonl, corpus, pages, written = folder / "large.jsonl", Corpus(seed=21), 0, 0
    print(f"generating {file_bytes / 1e6:,.0f} MB of pages ...", file=sys.stderr, flush=True)
    with jsonl.open("w", encoding="utf-8") as out:
        while written < file_bytes:
            line = json.dumps(corpus.page(pages)) + "\n"  # ASCII: a character a byte
            out.write(line)
            written, pages = written + len(line), pages + 1
    command = [str(CITEFLOW), "ingest", str(jsonl), "--db", str(folder / "large.duckdb")]
    started = time.perf_counter()
    process = subprocess.Popen(
        command, env=os.environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    with TreeMemory(process.pid) as memory:
        _, err = process.communicate()
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise RuntimeError(f"citeflow ingest exited {process.returncode}: {err[-800:]}")
    jsonl.unlink()
    return IngestMemory(written, pages, seconds, memory.peak_root / 2**20)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--added", type=int, default=1_000)
    parser.add_argument("--claims", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="citeflow-scale-") as folder:
        figures = measure(Path(folder), args.pages, args.added, args.claims)
    print(f"ingest    {figures.pages:,} pages in {figures.ingest_seconds:.1f} s = "
          f"{figures.pages_per_second:,.0f} pages/s (parse {figures.parse_seconds:.1f} s, store "
          f"{figures.store_seconds:.1f} s, index {figures.index_seconds:.1f} s)")  # fmt: skip
    print(
        f"search    p50 {figures.search_percentile(0.5):.0f} ms, p95 {figures.search_percentile(0.95):.0f} ms"
    )
    print(f"refresh   {figures.refresh_seconds:.2f} s after {figures.added:,} pages added")
    print(f"put_page  {figures.put_page_ms:.1f} ms (median of 10)")
    for name in AGGREGATES:
        print(f"aggregate {figures.aggregate_median_ms(name):.0f} ms over {figures.claims:,} claims: {name}")
    print(f"size      {figures.size_bytes / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
