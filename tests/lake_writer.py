"""A process writing to a lake the way concurrent runs do, for tests/test_lake.py.

    python tests/lake_writer.py LOCATION TAG SHARED OWN

Starts run TAG; stores SHARED pages every writer stores too (same URLs and text, so the same page ids)
and OWN pages of its own, a few per transaction, interleaved; adds one verified claim per page it
stored and numbers the run's sources (an UPDATE of `claims`, which conflicts with the other writers'
on a lake); finishes the run. Prints "done" at the end.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from citeflow.config import StoreSettings  # noqa: E402
from citeflow.contracts import (  # noqa: E402
    Claim,
    ClaimStatus,
    Origin,
    PageInput,
    RunMetrics,
    RunSource,
    RunStatus,
    SubQuestion,
)
from storage.store import get_store  # noqa: E402

BATCH = 3


def page(url: str, n: int) -> PageInput:
    return PageInput(
        url=url, title=f"Page {n}", text=f"Page {n} says the value is {n * 7}. " * 5, origin=Origin.fetched
    )


def main(location: str, tag: str, shared: int, own: int) -> None:
    store = get_store(
        Path(location), StoreSettings(data_path=os.environ["CITEFLOW_STORE__DATA_PATH"], wait_seconds=300)
    )
    store.start_run(tag, f"question of {tag}", "extractive", "local", "{}")
    store.add_subquestions(tag, [SubQuestion(id="Q1", position=1, text="q", query="q")])
    wanted = [page(f"https://shared.example/{n}", n) for n in range(shared)]
    wanted += [page(f"https://{tag}.example/{n}", 1000 + n) for n in range(own)]
    stored = []
    for start in range(0, len(wanted), BATCH):
        stored += [page for page, _ in store.put_fetched(wanted[start : start + BATCH])]
    sources = [
        RunSource(run_id=tag, subquestion_id="Q1", page_id=item.id, provider="local", rank=rank)
        for rank, item in enumerate(stored, start=1)
    ]
    store.add_research(tag, "Q1", [], sources, [])
    claims = []
    for rank, item in enumerate(stored, start=1):
        quote = item.text[:40]
        claims.append(
            Claim(
                id=f"C{rank}",
                subquestion_id="Q1",
                page_id=item.id,
                page_hash=item.content_hash,
                text=quote,
                quote=quote,
                quote_start=0,
                quote_end=len(quote),
                status=ClaimStatus.verified,
            )
        )
    store.add_claims(tag, claims)
    store.number_sources(tag)
    store.finish_run(tag, RunStatus.complete, "report", None, RunMetrics())
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
