"""A process that writes to a store the way a run does: short sessions, with work between them.

    python tests/store_writer.py DB TAG

Each round stores one page and one trace under run id TAG in one session, then works (sleeps) for a
few milliseconds outside it, until a line arrives on stdin. Prints "started" once the first round is
stored, and at the end "wrote N" (the rounds, so the test can count the rows).
"""

from __future__ import annotations

import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from citeflow.contracts import Origin, Outcome, PageInput, Trace  # noqa: E402
from storage.store import get_store  # noqa: E402

WORK_SECONDS = 0.05  # a run's gaps between store work are longer: pages ranked, models called


def main(db: str, tag: str) -> None:
    store = get_store(Path(db))
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    rounds = 0
    while rounds == 0 or not stop.is_set():
        now = datetime.now(UTC)
        with store.session():
            store.put_page(
                PageInput(
                    url=f"https://{tag}.example/{rounds}",
                    title=f"{tag} {rounds}",
                    text=f"Round {rounds} of writer {tag}. " * 20,
                    origin=Origin.fetched,
                )
            )
            store.add_trace(
                Trace(run_id=tag, stage="write", actor=tag, started_at=now, ended_at=now, outcome=Outcome.ok)
            )
        rounds += 1
        if rounds == 1:
            print("started", flush=True)
        time.sleep(WORK_SECONDS)
    print(f"wrote {rounds}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
