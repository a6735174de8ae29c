"""What sharing the store file costs, and what one huge record costs a run.

    .venv/bin/python benchmarks/store.py open [--repeat 40]
    .venv/bin/python benchmarks/store.py sql-during-run [--runs 2] [--corpus FILE.jsonl]
    .venv/bin/python benchmarks/store.py big-record [--uncapped] [--megabytes 10]

`open` times, on a store holding citeflow's docs: a session that does nothing (open, schema version
check, CHECKPOINT, close), the same plus loading full-text search, one write in a session of its own,
and the same write inside a session already held.

`sql-during-run` starts `citeflow run` in other processes (each with its own temporary Prefect server)
on a store holding the docs (or a `--corpus`, on which runs last longer), and meanwhile asks the store,
both through `citeflow sql` (a new process each time) and through read_only_query in this process (no
start-up cost: that figure is the wait itself plus opening the file and a millisecond of query). It
prints the times while no run was writing and while one was.

`big-record` runs one question through the flow, in this process, on a store holding the docs plus
one record of `--megabytes` of prose, stored cut to the page-text cap as ingest now does, or whole
with `--uncapped`, as ingest did before. It prints the run's wall time and this process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from citeflow.contracts import Outcome, Trace  # noqa: E402
from storage.ingest import PAGE_TEXT_MAX_CHARS, ingest_paths  # noqa: E402
from storage.store import EvidenceStore, get_store, read_only_query  # noqa: E402

CITEFLOW = str(Path(sys.executable).parent / "citeflow")
DOCS = [REPO / "docs", REPO / "storage" / "SCHEMA.md"]
QUESTIONS = [
    "How does citeflow check that a quote appears on a page?",
    "Where is the search index stored?",
    "What does the verifier keep?",
]


def docs_store(folder: Path, corpus: Path | None = None) -> Path:
    db = folder / "bench.duckdb"
    ingest_paths(get_store(db), [corpus] if corpus else DOCS)
    return db


def milliseconds(seconds: list[float]) -> str:
    if not seconds:
        return "no sample"
    median, low, high = (value * 1000 for value in (statistics.median(seconds), min(seconds), max(seconds)))
    return f"median {median:.1f} ms (min {low:.1f}, max {high:.1f})"


def open_costs(repeat: int) -> None:
    store = EvidenceStore.open(docs_store(Path(tempfile.mkdtemp(prefix="citeflow-bench-"))))
    now = datetime.now(UTC)
    trace = Trace(run_id="bench", stage="s", actor="a", started_at=now, ended_at=now, outcome=Outcome.ok)

    def timed(step: object) -> list[float]:
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            step()  # type: ignore[operator]
            times.append(time.perf_counter() - started)
        return times

    def empty() -> None:
        with store.session():
            pass

    def with_fts() -> None:
        with store.session():
            store.load_fts()

    def write() -> None:
        store.add_trace(trace)

    print(f"session, nothing done (open, version check, checkpoint, close): {milliseconds(timed(empty))}")
    print(f"session that loads full-text search:                           {milliseconds(timed(with_fts))}")
    print(f"add_trace in a session of its own:                             {milliseconds(timed(write))}")
    with store.session():
        print(f"add_trace inside a held session:                               {milliseconds(timed(write))}")


def sql_during_run(runs: int, corpus: Path | None) -> None:
    folder = Path(tempfile.mkdtemp(prefix="citeflow-bench-"))
    db = docs_store(folder, corpus)
    running_sql = "SELECT count(*) AS running FROM runs WHERE status = 'running'"

    def cli_sql() -> tuple[float, int]:
        started = time.perf_counter()
        done = subprocess.run(
            [CITEFLOW, "sql", running_sql, "--db", str(db), "--json"], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        return time.perf_counter() - started, json.loads(done.stdout)["running"]

    def in_process() -> tuple[float, int]:
        started = time.perf_counter()
        running = read_only_query(db, running_sql)[1][0][0]
        return time.perf_counter() - started, running

    idle_cli = [cli_sql()[0] for _ in range(3)]
    idle_query = [in_process()[0] for _ in range(20)]
    questions = QUESTIONS
    if corpus:  # a question about each of the first records, so the runs find evidence
        lines = corpus.read_text(encoding="utf-8").splitlines()[:runs]
        questions = [f"What is known about {json.loads(line)['title']}?" for line in lines]
    processes = [
        subprocess.Popen(
            [
                CITEFLOW,
                "run",
                questions[n % len(questions)],
                "--db",
                str(db),
                "--reports",
                str(folder / "reports"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(runs)
    ]
    during_cli: list[float] = []
    during_query: list[float] = []
    while any(process.poll() is None for process in processes):
        for ask, during in ((cli_sql, during_cli), (in_process, during_query), (in_process, during_query)):
            seconds, running = ask()
            if running:
                during.append(seconds)
    for process in processes:
        if process.wait() != 0:
            raise SystemExit(f"a run failed: {process.stderr.read() if process.stderr else ''}")
    walls = read_only_query(db, "SELECT round(wall_seconds, 1) FROM runs ORDER BY started_at")[1]
    print(f"{runs} run(s) at once, each run's own wall seconds: {[wall for (wall,) in walls]}")
    print(f"citeflow sql, no run writing:    {milliseconds(idle_cli)} (process start included)")
    print(f"citeflow sql, while runs wrote:  {milliseconds(during_cli)} over {len(during_cli)} calls")
    print(f"read_only_query, no run writing: {milliseconds(idle_query)}")
    waits = milliseconds(during_query)
    print(
        f"read_only_query, while runs wrote (the wait for the file): {waits} over {len(during_query)} calls"
    )


def prose(megabytes: float) -> str:
    """Sentences of citeflow's own docs, shuffled into paragraphs until the text is this large."""
    text = " ".join(path.read_text(encoding="utf-8") for path in (REPO / "docs").glob("*.md"))
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if len(s.strip()) > 30]
    rng = random.Random(11)
    paragraphs: list[str] = []
    size = 0
    while size < megabytes * 1_000_000:
        paragraph = " ".join(rng.sample(sentences, 5))
        paragraphs.append(paragraph)
        size += len(paragraph) + 2
    return "\n\n".join(paragraphs)


def big_record(megabytes: float, uncapped: bool) -> None:
    from flows.research import research_flow

    folder = Path(tempfile.mkdtemp(prefix="citeflow-bench-"))
    db = docs_store(folder)
    corpus = folder / "big.jsonl"
    record = {
        "url": "https://example.org/everything",
        "title": "How citeflow works",
        "text": prose(megabytes),
    }
    corpus.write_text(json.dumps(record) + "\n", encoding="utf-8")
    report = ingest_paths(get_store(db), [corpus], max_chars=10**9 if uncapped else PAGE_TEXT_MAX_CHARS)
    stored = read_only_query(db, "SELECT max(length(text)) FROM pages")[1][0][0]
    print(f"record of {len(record['text']):,} characters stored as {stored:,} ({report.cut} cut)")

    # Starts the temporary Prefect server, so the figures below are the run's alone (it fails: no pages).
    research_flow(
        question="What is citeflow?", settings={"db": str(folder / "warm.duckdb")}, return_state=True
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    result = research_flow(
        question=QUESTIONS[0],
        settings={"db": str(db), "reports": str(folder / "reports")},
        return_state=True,
    )
    wall = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    status = read_only_query(
        db, "SELECT status, round(wall_seconds, 1) FROM runs ORDER BY started_at DESC LIMIT 1"
    )[1]
    print(f"run: {result.type.value}, runs row {status[0]}; wall {wall:.1f} s")
    print(f"peak RSS of this process: {peak:.0f} MB (before the run: {before:.0f} MB)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    opened = commands.add_parser("open")
    opened.add_argument("--repeat", type=int, default=40)
    during = commands.add_parser("sql-during-run")
    during.add_argument("--runs", type=int, default=2)
    during.add_argument("--corpus", type=Path)
    big = commands.add_parser("big-record")
    big.add_argument("--megabytes", type=float, default=10)
    big.add_argument("--uncapped", action="store_true")
    args = parser.parse_args()
    if args.command == "open":
        open_costs(args.repeat)
    elif args.command == "sql-during-run":
        sql_during_run(args.runs, args.corpus)
    else:
        big_record(args.megabytes, args.uncapped)


if __name__ == "__main__":
    main()
