"""Every benchmark of issues 13 and 20, against simulated servers on loopback; writes RESULTS.md.

    scripts/bench            the full benchmark (about 30 minutes on 2 cores): writes benchmarks/RESULTS.md
    scripts/bench --quick    small sizes and short delays (about 5 minutes, run by scripts/test): prints the
                             figures, compares none with its target, writes nothing unless --out is given

Each run is a real run: the simulated model (benchmarks/simulation.py) answers after a fixed delay with
well-formed replies whose quotes come from the page text it was sent, so runs verify claims and write
reports that pass the audit. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks"), str(REPO / "tests")]

SEED_DESIGN_TOKENS = 105_900


@dataclass(frozen=True)
class Size:
    """What one benchmark run of `scripts/bench` measures, full or quick."""

    model_delay: float
    fetch_delay: float
    hosts: int
    small: tuple[int, int]  # sub-questions x pages for the critical path, overhead, re-run and tokens
    large: tuple[int, int] | None  # for the second critical path figure and memory; None: not measured
    repeats: int  # runs per figure; the median is reported
    store_pages: int
    store_added: int
    store_claims: int
    freshness_hours: float  # the web freshness window of the re-run benchmark's runs
    topic_runs: int  # topic runs on one worker, then on three (a multiple of 3)
    ingest_bytes: int  # the JSON Lines file whose `citeflow ingest` memory is measured


FULL = Size(1.0, 0.3, 50, (5, 4), (20, 10), 3, 100_000, 1_000, 1_000_000, 0.01, 12, 1_000_000_000)
QUICK = Size(0.1, 0.02, 50, (2, 2), None, 1, 2_000, 100, 20_000, 0.002, 3, 20_000_000)


@dataclass
class Row:
    item: str
    figure: str
    measured: str
    target: str = ""
    met: bool | None = None

    def cells(self, compare: bool) -> list[str]:
        met = "" if self.met is None or not compare else ("yes" if self.met else "**no**")
        return [self.item, self.figure, self.measured, self.target, met]


@dataclass
class Results:
    compare: bool  # whether figures are judged against their targets (not in a quick run)
    rows: list[Row] = field(default_factory=list)
    details: list[str] = field(default_factory=list)

    def add(self, item: str, figure: str, measured: str, target: str = "", met: bool | None = None) -> None:
        row = Row(item, figure, measured, target if self.compare else "", met)
        self.rows.append(row)
        print(" | ".join(row.cells(self.compare)), flush=True)

    def note(self, line: str) -> None:
        self.details.append(line)
        print(line, flush=True)


class MachineLoad:
    """What else the machine was doing: the load average, and the CPU time other processes used
    (all busy CPU time minus this benchmark's own, its finished children included)."""

    def __init__(self, interval: float = 5.0) -> None:
        import psutil

        self.psutil = psutil
        self.interval = interval
        self.loads: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._busy_start = self._busy()
        self._own_start = self._own()
        self._started = time.monotonic()

    def _busy(self) -> float:
        times = self.psutil.cpu_times()
        return sum(times) - times.idle - getattr(times, "iowait", 0.0)

    def _own(self) -> float:
        me = os.times()
        live = 0.0
        for child in self.psutil.Process().children(recursive=True):
            with suppress(self.psutil.Error):  # it ended between listing and reading
                live += sum(child.cpu_times()[:2])
        return me.user + me.system + me.children_user + me.children_system + live

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.loads.append(os.getloadavg()[0])

    def __enter__(self) -> MachineLoad:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        elapsed = time.monotonic() - self._started
        self.busy_cores = (self._busy() - self._busy_start) / elapsed
        self.own_cores = (self._own() - self._own_start) / elapsed

    def describe(self) -> str:
        cores = os.cpu_count() or 1
        loads = self.loads or [os.getloadavg()[0]]
        others = max(0.0, self.busy_cores - self.own_cores)
        return (
            f"{cores} cores, shared. During the benchmark the 1-minute load average was "
            f"{min(loads):.1f} to {max(loads):.1f} (mean {statistics.mean(loads):.1f}); the cores were busy "
            f"{self.busy_cores:.2f} of {cores} on average, {self.own_cores:.2f} of it this benchmark's "
            f"processes (the Prefect server it started not counted) and about {others:.2f} other engineers' "
            "processes."
        )


def prepare_environment(folder: Path) -> None:
    """Prefect's home in the benchmark's folder (results cached by earlier benchmarks or runs must not
    answer), offline Prefect defaults, and no citeflow setting leaking in from the shell."""
    for name in [*os.environ]:
        if name.startswith("CITEFLOW_") or name in {"OPENAI_BASE_URL", "OPENAI_API_KEY", "SEARXNG_URL",
                                                     "TAVILY_API_KEY", "PREFECT_API_URL"}:  # fmt: skip
            del os.environ[name]
    os.environ["PREFECT_HOME"] = str(folder / "prefect-home")
    from citeflow.prefect_env import apply_prefect_defaults

    apply_prefect_defaults()


@contextmanager
def citeflow_server(db: Path) -> Iterator[float]:
    """`citeflow server start` for the store's folder, on a free loopback port; the seconds it took."""
    from cli.server import free_port, start_server, stop_server

    started = time.perf_counter()
    state = start_server(db, port=free_port())
    seconds = time.perf_counter() - started
    os.environ["PREFECT_API_URL"] = state.url
    try:
        yield seconds
    finally:
        del os.environ["PREFECT_API_URL"]
        stop_server(db)


def dotted_settings(sim: Any, size: tuple[int, int]) -> dict[str, Any]:
    """A run on the simulation at size S x P: `caps.subquestions_max` S, `caps.pages_per_search` P."""
    subquestions, pages = size
    return {
        **sim.settings(),
        "caps.subquestions_max": subquestions,
        "caps.subquestions_min": min(3, subquestions),
        "caps.pages_per_search": pages,
    }


def dotted(sim: Any, folder: Path, name: str, size: tuple[int, int], **more: Any) -> dict[str, Any]:
    return {
        **dotted_settings(sim, size),
        "db": str(folder / f"{name}.duckdb"),
        "reports": str(folder / "reports"),
        **more,
    }


def seconds(value: float) -> str:
    return f"{value:.2f} s"


def stage_table(results: Results, label: str, run: Any) -> None:
    """Where a run's time went: each stage's wall time and its part of the critical path."""
    path = run.path
    parts = {
        "plan": path["plan"],
        "research": path["research (slowest)"],
        "verify": path["verify (one round)"],
        "write": path["synthesise"] + path["critique"],
    }
    cells = ", ".join(
        f"{stage} {run.stages.get(stage, 0):.2f} s (path {parts[stage]:.2f})" for stage in parts
    )
    outside = (run.flow_wall or run.wall) - sum(run.stages.values())
    results.note(
        f"- {label}: {run.status}, {run.sentences} sentences citing {run.sources} sources; wall "
        f"{run.wall:.2f} s, flow {run.flow_wall or run.wall:.2f} s, critical path {run.ideal:.2f} s. Stages: "
        f"{cells}; outside the stages {outside:.2f} s. Slowest stage: {run.slowest_stage}."
    )


def critical_path(results: Results, sim: Any, folder: Path, size: Size) -> Any:
    from flow_runs import flow_run, median_run
    from simulation import QUESTION

    if size.repeats > 1:  # a full run: its figures are not to include the process's first imports and calls
        flow_run(QUESTION, dotted(sim, folder, "warm-up", size.small), refresh=True)
    medians = {}
    sizes = [("small", size.small, 0.85)] + ([("large", size.large, 0.80)] if size.large else [])
    for label, shape, target in sizes:
        runs = [
            flow_run(QUESTION, dotted(sim, folder, f"path-{label}-{n}", shape), refresh=True)
            for n in range(size.repeats)
        ]
        run = median_run(runs)
        medians[label] = run
        efficiencies = ", ".join(f"{r.efficiency:.2f}" for r in runs)
        results.add(
            "1", f"critical-path efficiency, {shape[0]} x {shape[1]} (ideal / actual)",
            f"{run.efficiency:.2f} ({seconds(run.ideal)} / {seconds(run.flow_wall or run.wall)}; "
            f"runs: {efficiencies})",
            f">= {target}", run.efficiency >= target,
        )  # fmt: skip
        stage_table(results, f"critical path {shape[0]} x {shape[1]} (median run)", run)
    return medians["small"]


def overhead(results: Results, sim: Any, folder: Path, size: Size) -> None:
    from flow_runs import direct_run, flow_run, median_run
    from simulation import QUESTION

    prefect, direct = [], []
    for n in range(size.repeats):  # alternated, so that load from elsewhere falls on both alike
        prefect.append(
            flow_run(QUESTION, dotted(sim, folder, f"overhead-flow-{n}", size.small), refresh=True)
        )
        direct.append(direct_run(QUESTION, dotted(sim, folder, f"overhead-direct-{n}", size.small)))
    with_prefect = statistics.median(run.wall for run in prefect)
    without = statistics.median(run.wall for run in direct)
    added = with_prefect / without - 1
    shape = f"{size.small[0]} x {size.small[1]}"
    results.add(
        "2", f"orchestration overhead, {shape}: Prefect with a server vs the same stage functions in threads",
        f"+{added:.0%} ({seconds(with_prefect)} vs {seconds(without)}, medians of {size.repeats})",
        "<= +15%", added <= 0.15,
    )  # fmt: skip
    stage_table(results, f"the same stages without Prefect, {shape} (median run)", median_run(direct))


def reruns(results: Results, sim: Any, folder: Path, size: Size) -> None:
    """A first run, the same run again, and a run after the web freshness window in which one of the
    pages read has changed (a scheduled re-run): model calls, tokens and wall time of each."""
    from flow_runs import flow_run
    from simulation import QUESTION

    settings = dotted(sim, folder, "rerun", size.small, **{"web.freshness_hours": size.freshness_hours})
    first = flow_run(QUESTION, settings, refresh=True)
    first_ended = time.monotonic()
    again = flow_run(QUESTION, settings, refresh=False)
    sim.revise(0, 0)  # the first sub-question's best page
    # Past the window for everything the first run stored: its cached research and its pages.
    time.sleep(max(0.0, size.freshness_hours * 3600 - (time.monotonic() - first_ended)))
    changed = flow_run(QUESTION, settings, refresh=False)
    for label, run in [
        ("unchanged question, run again", again),
        ("one page changed, after the freshness window", changed),
    ]:
        calls, wall = run.calls / max(first.calls, 1), run.wall / first.wall
        results.add(
            "3", f"re-run: {label}",
            f"{run.calls} of {first.calls} calls ({calls:.0%}), {run.tokens:,} of {first.tokens:,} tokens, "
            f"{seconds(run.wall)} of {seconds(first.wall)} ({wall:.0%})",
            "<= 10% of calls, <= 30% of wall", calls <= 0.10 and wall <= 0.30,
        )  # fmt: skip
    results.note(
        f"- re-run with one page changed: its own critical path (research again, verify the changed page, "
        f"synthesise and critique its new claims) is {changed.ideal:.2f} s, {changed.ideal / first.wall:.0%} "
        "of the first run's wall time, before any orchestration."
    )
    stage_table(results, "re-run, first run", first)
    stage_table(results, "re-run, unchanged", again)
    stage_table(results, "re-run, one page changed", changed)


def tokens(results: Results, run: Any, size: Size) -> None:
    shape = f"{size.small[0]} x {size.small[1]}"
    results.add(
        "6", f"tokens per report on the model path, {shape}", f"{run.tokens:,} in {run.calls} calls",
        f"<= 60,000 (seed design: {SEED_DESIGN_TOKENS:,})", run.tokens <= 60_000,
    )  # fmt: skip
    for role, usage in sorted(run.roles.items()):
        calls = f"{usage.calls} calls: {usage.prompt:,} prompt + {usage.completion:,} completion"
        results.add("6", f"tokens, {role}", calls)


def import_seconds() -> float:
    """What a fresh interpreter takes to import what `citeflow run` imports before its flow starts."""
    command = [sys.executable, "-c", "import time; t = time.perf_counter(); import cli.main, flows.research; "
               "print(time.perf_counter() - t)"]  # fmt: skip
    return float(subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True).stdout)


def startup(results: Results, sim: Any, folder: Path, server_db: Path, size: Size, quick: bool) -> None:
    from simulation import QUESTION
    from startup import first_task

    def flags(shape: tuple[int, int]) -> dict[str, Any]:
        return {"caps.subquestions_max": shape[0], "caps.subquestions_min": min(3, shape[0]),
                "caps.pages_per_search": shape[1]}  # fmt: skip

    env = sim.environment()
    served = first_task(server_db.parent / "cold-served.duckdb", QUESTION, env, flags(size.small))
    results.add("5", "cold start: `citeflow run` to its first task, `citeflow server` running",
                seconds(served.first_task), "< 5 s", served.first_task < 5)  # fmt: skip
    if quick:
        return
    results.note(
        f"- cold start with `citeflow server`: the run's row was written {served.run_row:.2f} s after the "
        f"command started, its first task began {served.first_task:.2f} s after; importing citeflow's "
        f"command line and flow takes {import_seconds():.2f} s in a fresh interpreter on this machine now."
    )
    alone = folder / "no-server"
    fresh = first_task(alone / "cold-fresh.duckdb", QUESTION, env, flags(size.small))
    results.add("5", "cold start without a server: temporary server, new Prefect database",
                seconds(fresh.first_task), "< 40 s", fresh.first_task < 40)  # fmt: skip
    again = first_task(alone / "cold-again.duckdb", QUESTION, env, flags(size.small))
    results.add("5", "cold start without a server: temporary server, existing Prefect database",
                seconds(again.first_task), "< 40 s", again.first_task < 40)  # fmt: skip
    assert size.large is not None  # the full size measures both
    large = first_task(alone / "memory.duckdb", QUESTION, env, flags(size.large))
    shape = f"{size.large[0]} x {size.large[1]}"
    results.add(
        "5", f"peak memory of a {shape} `citeflow run` (RSS of its process tree, temporary server included)",
        f"{large.peak_tree_mb:,.0f} MB (the run itself {large.peak_run_mb:,.0f} MB)", "< 1 GB",
        large.peak_tree_mb < 1024,
    )  # fmt: skip


def quick_memory(results: Results, sim: Any, folder: Path, server_db: Path, size: Size) -> None:
    """Quick mode: after the server stopped, one small run on a temporary server (existing database)."""
    from simulation import QUESTION
    from startup import first_task

    run = first_task(server_db.parent / "cold-alone.duckdb", QUESTION, sim.environment(),
                     {"caps.subquestions_max": size.small[0], "caps.subquestions_min": min(3, size.small[0]),
                      "caps.pages_per_search": size.small[1]})  # fmt: skip
    results.add("5", "cold start without a server (existing Prefect database)", seconds(run.first_task))
    results.add("5", "peak memory of that run's process tree", f"{run.peak_tree_mb:,.0f} MB")


def store_scale(results: Results, folder: Path, size: Size) -> float:
    """Item 4; returns the file store's ingest rate (pages/s), which item 7 compares a lake's with."""
    from store_scale import AGGREGATES, measure

    figures = measure(folder / "store", size.store_pages, size.store_added, size.store_claims)
    results.add(
        "4", f"ingest {figures.pages:,} generated pages (`citeflow ingest`)",
        f"{figures.pages_per_second:,.0f} pages/s ({seconds(figures.ingest_seconds)}: parse "
        f"{figures.parse_seconds:.1f}, store {figures.store_seconds:.1f}, index {figures.index_seconds:.1f})",
        ">= 1,000 pages/s", figures.pages_per_second >= 1000,
    )  # fmt: skip
    p50, p95 = figures.search_percentile(0.5), figures.search_percentile(0.95)
    results.add("4", f"local search over {figures.pages:,} pages, p50 / p95 of 100 queries",
                f"{p50:.0f} ms / {p95:.0f} ms", "p50 < 100 ms", p50 < 100)  # fmt: skip
    results.add("4", f"index refresh after adding {figures.added:,} pages",
                seconds(figures.refresh_seconds), "< 2 s", figures.refresh_seconds < 2)  # fmt: skip
    pages = figures.pages + figures.added
    results.add("4", f"one fetched page stored (`put_page`) in the {pages:,}-page store",
                f"{figures.put_page_ms:.0f} ms")  # fmt: skip
    for name in AGGREGATES:
        aggregate = figures.aggregate_median_ms(name)
        results.add("4", f"`citeflow sql` aggregate over {figures.claims:,} claims: {name}",
                    f"{aggregate:,.0f} ms", "< 1 s", aggregate < 1000)  # fmt: skip

    results.add("4", "store size on disk", f"{figures.size_bytes / 1e6:,.0f} MB")
    return figures.pages_per_second


def ingest_memory(results: Results, folder: Path, size: Size) -> None:
    """Issue 21: `citeflow ingest` streams, so its memory does not grow with the file."""
    from store_scale import ingest_memory as measure

    figures = measure(folder / "ingest-memory", size.ingest_bytes)
    results.add(
        "4", f"peak memory of `citeflow ingest` of a {figures.file_bytes / 1e9:.2f} GB JSON Lines file "
        f"({figures.pages:,} pages)", f"{figures.peak_mb:,.0f} MB ({seconds(figures.seconds)})", "< 500 MB",
        figures.peak_mb < 500,
    )  # fmt: skip


def scale_out(results: Results, sim: Any, folder: Path, size: Size, file_rate: float) -> None:
    """Item 7 (issue 20): one worker against three, `citeflow sql` meanwhile, ingest into a lake."""
    from lake_servers import postgres_bin, postgres_server, s3_server
    from scale_out import describe, lake_ingest_seconds, measure_workers

    if postgres_bin() is None:
        results.add("7", "workers and lake", "not measured: PostgreSQL is not installed (scripts/setup dev)")
        return
    with postgres_server() as postgres, s3_server("citeflow-bench") as s3:
        parse, store, index = lake_ingest_seconds(postgres, s3, size.store_pages, folder / "lake-ingest")
        rate = size.store_pages / (parse + store + index)
        results.add(
            "7", f"ingest {size.store_pages:,} generated pages into a lake (PostgreSQL catalog, S3 data)",
            f"{rate:,.0f} pages/s vs {file_rate:,.0f} in the file store ({seconds(parse + store + index)}: "
            f"parse {parse:.1f}, store {store:.1f}, index {index:.1f})",
        )  # fmt: skip
        one, three = measure_workers(
            postgres, s3, sim, size.topic_runs, dotted_settings(sim, size.small), folder / "workers"
        )
    ratio = one.seconds / three.seconds
    results.add(
        "7", f"throughput of {size.topic_runs} topic runs, 3 workers vs 1 (one lake, one result bucket)",
        f"{ratio:.2f}x ({three.seconds:.1f} s vs {one.seconds:.1f} s)", ">= 2.2x", ratio >= 2.2,
    )  # fmt: skip
    for phase in (one, three):
        results.add("7", f"`citeflow sql` on the lake during the runs on {phase.workers} worker(s), median",
                    f"{phase.sql_median_ms:,.0f} ms ({len(phase.sql_ms)} queries, {phase.sql_failures} "
                    f"failed; before the runs {phase.idle_median_ms:,.0f} ms)")  # fmt: skip
        results.note(f"- workers: {describe(phase)}.")


def machine() -> str:
    import duckdb
    import prefect

    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor() or "unknown CPU",
    )  # fmt: skip
    import psutil

    memory = psutil.virtual_memory().total / 2**30
    return (
        f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} cores, {memory:.0f} GB; "
        f"Python {platform.python_version()}, Prefect {prefect.__version__}, DuckDB {duckdb.__version__}"
    )


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    return f"{git('rev-parse', '--short', 'HEAD')} on {git('rev-parse', '--abbrev-ref', 'HEAD')}{dirty}"


METHOD = """\
## How each figure is measured

Every run is a real `research_flow` run (or `citeflow run`) against servers on loopback, in a process of
their own (benchmarks/simulation.py): an OpenAI-compatible model that answers every call after {model} s,
and a SearXNG-format search server and {hosts} web hosts (127.0.0.2, ...) that answer every request,
robots.txt included, after {fetch} s. Each study site's ten pages are on ten hosts, as search results are
on the real web; pages hold 3,000 to 24,000 characters of article text. The model plans one sub-question
per site, quotes page sentences word for word, writes one sentence per verified claim and approves.
Settings are citeflow's defaults except the size: S x P means `caps.subquestions_max=S` and
`caps.pages_per_search=P`. Runs go to a `citeflow server` started for the benchmark (after one warm-up
run); `--refresh` makes every stage compute.

1. **Critical-path efficiency** = ideal / actual. Actual: the flow run's wall time as Prefect recorded
   it (start to end). Ideal, from the run's own traces: the plan step + the slowest research step + one
   verification round + every synthesis and critique. One verification round is the slowest verifier
   model call, timed from the moment the call holds its endpoint slot (`model_calls.latency_seconds`),
   so time queued for a slot counts against the figure. Median of {repeats} runs.
2. **Orchestration overhead**: wall time of the flow through Prefect (a `citeflow server` on loopback)
   against the same work with no Prefect: each task's own function (`task.fn`, traces and store writes
   included) in a thread pool as large as the flow's, composed as flows/research.py composes them
   (benchmarks/flow_runs.py `direct_run`). Alternated, medians of {repeats}.
3. **Re-run savings**: a first run, the same question again at once, then, after the web freshness
   window (`web.freshness_hours` = {freshness:g} for these runs), the same question with one of the
   pages it read changed on the web: what a scheduled re-run pays.
4. **Store scale**: pages of 1,000-3,000 characters (mean 2,000) drawn from a Zipf vocabulary, ingested
   from one JSON Lines file with the calls `citeflow ingest` makes (parse, store, index); 100 queries of
   two or three words through `LocalSearch`; the refresh after {added} more pages; `put_page` of one
   fetched page; two aggregates through `EvidenceStore.query` (`citeflow sql`), medians of 5; the file
   after a checkpoint. benchmarks/store_scale.py. Ingest memory: the same generator writes a JSON Lines
   file of {ingest_gb:g} GB, and `citeflow ingest` loads it into a new store in a process of its own, its
   resident set sampled every 0.1 s.
5. **Cold start**: `citeflow run` started as a process; seconds to the start of its plan task (its trace
   row). Memory: the resident set of the run's process tree (the run and the temporary Prefect server it
   starts), sampled every 0.1 s.
6. **Tokens**: the `model_calls` rows of item 1's {small} run; the simulated model reports usage as about
   four characters a token of what it is sent and returns.
7. **Beyond one machine** (issue 20; benchmarks/scale_out.py): on loopback, PostgreSQL (the lake's catalog
   and the Prefect server's database), moto (the lake's data and the S3 result bucket) and a Prefect
   server; {topic_runs} topic deployments (`citeflow topics` prefect.yaml, process work pool) started at once,
   each run {small} on the simulated model and web with `refresh` and `web.freshness_hours` = 0, so every
   run computes every stage and fetches every page. First on one `prefect worker`, then on three, each
   taking {per_worker} runs at a time and each phase on a lake of its own with citeflow's docs ingested;
   throughput ratio = the one worker's seconds from start to the last run's end / the three workers'.
   All of it shares this machine's cores: the three workers do not get three machines. Meanwhile
   `citeflow sql` (a new process each time, a GROUP BY over `claims`) runs one query after another, a
   second apart. Lake ingest: item 4's pages, generator and calls, into a new lake on the same servers.

## Defaults these figures are given at

- `models.max_concurrent_per_endpoint` = 16 (was 4): the default `caps.pages_verified_max` is 16, so a
  run's pages are verified in one round of model calls, not four. Since issue 14 this is the default for
  a remote endpoint only; one on this machine (llama.cpp, Ollama) gets 1 call at a time, so the
  simulated model, which stands for a hosted one, is given 16 in its settings (benchmarks/simulation.py).
- The flow's task runner has 64 threads (was 4; flows/research.py `TASK_WORKERS`): the pool only holds
  threads, and the real limits are the endpoint's model slots and the per-host fetch politeness
  (`web.per_domain_concurrency` = 2, `web.per_domain_delay` = 1.0 s, unchanged).
- `caps.subquestions_max` may be up to 20 (was at most 10; the default is still 5), for the 20 x 10 runs.
"""


def by_item(row: Row) -> str:
    return row.item


def write_results(path: Path, results: Results, size: Size, took: float, load: str) -> None:
    header = ["#", "figure", "measured", "target", "met?"]
    lines = [
        "# Benchmarks",
        "",
        "Written by `scripts/bench` (benchmarks/bench.py); run it again to refresh every figure.",
        "",
        f"- Machine: {machine()}",
        f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; the benchmark took {took / 60:.0f} minutes",
        f"- Commit: {commit()}",
        f"- Load: {load}",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row.cells(results.compare)) + " |" for row in sorted(results.rows, key=by_item)),
        "",
        "Where a target is missed, benchmarks/PROFILES.md says where the time goes, measured by profiling.",
        "",
        "## Where each run's time went",
        "",
        *results.details,
        "",
        METHOD.format(
            model=size.model_delay,
            fetch=size.fetch_delay,
            hosts=size.hosts,
            repeats=size.repeats,
            freshness=size.freshness_hours,
            added=f"{size.store_added:,}",
            small=f"{size.small[0]} x {size.small[1]}",
            topic_runs=size.topic_runs,
            ingest_gb=size.ingest_bytes / 1e9,
            per_worker=size.topic_runs // 3,
        ),  # fmt: skip
    ]
    path.write_text("\n".join(lines), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Small sizes and delays; figures only printed.")
    parser.add_argument(
        "--out", type=Path, help="Where to write the results (default: benchmarks/RESULTS.md, full run only)."
    )
    args = parser.parse_args()
    size = QUICK if args.quick else FULL
    out = args.out or (None if args.quick else REPO / "benchmarks" / "RESULTS.md")
    folder = Path(tempfile.mkdtemp(prefix="citeflow-bench-"))
    prepare_environment(folder)
    results = Results(compare=not args.quick)
    started = time.monotonic()
    try:
        with MachineLoad() as load:
            file_rate = store_scale(results, folder, size)
            ingest_memory(results, folder, size)
            from simulation import running_simulation

            server_db = folder / "served" / "server.duckdb"
            with running_simulation(size.model_delay, size.fetch_delay, size.hosts) as sim:
                with citeflow_server(server_db) as server_seconds:
                    results.note(
                        f"- `citeflow server start` took {server_seconds:.1f} s (new Prefect database)."
                    )
                    small = critical_path(results, sim, folder, size)
                    overhead(results, sim, folder, size)
                    reruns(results, sim, folder, size)
                    tokens(results, small, size)
                    startup(results, sim, folder, server_db, size, args.quick)
                if args.quick:
                    quick_memory(results, sim, folder, server_db, size)
                scale_out(results, sim, folder, size, file_rate)
        took = time.monotonic() - started
        print(load.describe())
        if out is not None:
            write_results(out, results, size, took, load.describe())
            print(f"wrote {out}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
