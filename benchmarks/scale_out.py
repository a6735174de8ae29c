"""Beyond one machine (issue 20): topic runs on one `prefect worker` against three, `citeflow sql` while
they run, and ingest into a lake against the file store.

Everything runs on loopback, as tests/test_workers.py runs it: PostgreSQL (the lake's catalog and the
Prefect server's own database), moto (the lake's data files and the S3 result bucket every worker caches
its stages in), a Prefect server, and the simulated model and web of benchmarks/simulation.py. Each phase
has a lake of its own, so both start alike: an empty store with citeflow's docs ingested. Runs are
started with `refresh` and `web.freshness_hours = 0`, so every run computes every stage and fetches every
page, whatever ran before it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lake_servers import S3, Postgres
from prefect_servers import prefect_server
from simulation import QUESTION, Simulation
from store_scale import Corpus, ingest, percentile
from worker_pool import (
    BIN,
    REPO,
    deploy,
    finished,
    save_results_block,
    start_run,
    start_workers,
    stop_workers,
    worker_env,
)

from citeflow.config import StoreSettings
from deployments.topics import generated_prefect_yaml
from flows.topics import Topic
from storage.store import EvidenceStore

# What a reader asks while the runs write: every claim so far, by status (a whole-runs-only read).
PROBE_SQL = "SELECT status, count(*) AS claims FROM claims GROUP BY status"
PHASES = (1, 3)  # workers


@dataclass
class Phase:
    workers: int
    runs: int
    seconds: float
    states: Counter[str]
    idle_sql_ms: list[float] = field(default_factory=list)  # the same query just before the runs start
    sql_ms: list[float] = field(default_factory=list)
    sql_failures: int = 0
    failures: list[str] = field(default_factory=list)  # the state message of each run that did not complete

    @property
    def runs_per_minute(self) -> float:
        return self.runs / self.seconds * 60

    @property
    def sql_median_ms(self) -> float:
        return median(self.sql_ms)

    @property
    def idle_median_ms(self) -> float:
        return median(self.idle_sql_ms)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def sql_ms(env: dict[str, str]) -> float | None:
    """The wall time of one `citeflow sql` of PROBE_SQL, process start included, as a reader at a terminal
    sees it; None when it failed."""
    started = time.perf_counter()
    done = subprocess.run([str(BIN / "citeflow"), "sql", "--json", PROBE_SQL], env=env, cwd=REPO,
                          capture_output=True, timeout=300)  # fmt: skip
    return (time.perf_counter() - started) * 1000 if done.returncode == 0 else None


class SqlProbe:
    """`citeflow sql` run again and again, one at a time, while the phase's runs go."""

    def __init__(self, env: dict[str, str], phase: Phase) -> None:
        self.env, self.phase = env, phase
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._probe, daemon=True)

    def _probe(self) -> None:
        while not self._stop.wait(1.0):
            if (ms := sql_ms(self.env)) is None:
                self.phase.sql_failures += 1
            else:
                self.phase.sql_ms.append(ms)

    def __enter__(self) -> SqlProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def lake_env(postgres: Postgres, s3: S3, name: str) -> dict[str, str]:
    """Where a process finds the lake `name`: its catalog database and its data folder in the bucket."""
    return {
        "CITEFLOW_DB": postgres.location(name),
        "CITEFLOW_STORE__DATA_PATH": f"s3://{s3.bucket}/{name}/",
        **s3.env(),
    }


def run_phase(
    prefect: dict[str, str], lake: dict[str, str], sim: Simulation, parameters: dict[str, Any],
    topics: list[Topic], workers: int, folder: Path,
) -> Phase:  # fmt: skip
    """The topics' runs started at once on `workers` workers, each taking len(topics) / 3 runs at a time
    (so three workers take them all at once, and one takes a third)."""
    folder.mkdir(parents=True)
    subprocess.run([str(BIN / "citeflow"), "ingest", "docs"], cwd=REPO, env={**prefect, **lake},
                   check=True, capture_output=True)  # fmt: skip
    names = tuple(f"{folder.name}-worker-{n + 1}" for n in range(workers))
    env_of = {}
    for name in names:
        (folder / name).mkdir()
        env_of[name] = worker_env(prefect, folder / name, sim.model_url, lake)
    pool = start_workers(names, env_of, folder, limit=max(1, len(topics) // 3))
    try:
        api_url = prefect["PREFECT_API_URL"]
        phase = Phase(workers, len(topics), 0.0, Counter())
        phase.idle_sql_ms = [ms for _ in range(3) if (ms := sql_ms({**prefect, **lake})) is not None]
        with SqlProbe({**prefect, **lake}, phase):
            started = time.monotonic()
            ids = [start_run(api_url, topic.name, parameters) for topic in topics]
            ended = finished(api_url, ids, 3600, folder)
            phase.seconds = time.monotonic() - started
        phase.states = Counter(run["state"]["type"] for run in ended)
        phase.failures = [
            " ".join((run["state"].get("message") or "").split())[:300]
            for run in ended
            if run["state"]["type"] != "COMPLETED"
        ]
        return phase
    finally:
        stop_workers(pool)


def measure_workers(
    postgres: Postgres, s3: S3, sim: Simulation, runs: int, settings: dict[str, Any], folder: Path
) -> list[Phase]:
    """`runs` topic runs on one worker, then on three; one Prefect server (on PostgreSQL) for both."""
    postgres.create_database("prefect")
    (folder / "prefect-server").mkdir(parents=True)
    with prefect_server(folder / "prefect-server", database=postgres.sqlalchemy_url("prefect")) as prefect:
        topics = [Topic(name=f"survey-{n + 1:02}", question=QUESTION, cron="0 0 1 1 *") for n in range(runs)]
        (folder / "prefect.yaml").write_text(generated_prefect_yaml(topics))
        deploy(prefect, folder / "prefect.yaml")
        save_results_block(prefect, s3.endpoint, s3.bucket)
        every_page = {**settings, "web.freshness_hours": 0}
        parameters = {"question": QUESTION, "refresh": True, "settings": every_page}
        phases = []
        for workers in PHASES:
            name = f"lake{workers}"
            postgres.create_database(name)
            lake = lake_env(postgres, s3, name)
            phases.append(run_phase(prefect, lake, sim, parameters, topics, workers, folder / name))
        return phases


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """`values` in this process's environment for the block (the lake's S3 keys, read by DuckDB's httpfs)."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def lake_ingest_seconds(postgres: Postgres, s3: S3, pages: int, folder: Path) -> tuple[float, float, float]:
    """Seconds to parse, store and index `pages` generated pages in a new lake, with the calls `citeflow
    ingest` makes: the same pages, generator and calls as the file store's ingest figure."""
    postgres.create_database("ingest")
    lake = lake_env(postgres, s3, "ingest")
    folder.mkdir(parents=True, exist_ok=True)
    jsonl = Corpus().write(folder / "lake-corpus.jsonl", 0, pages)
    with environment(lake):
        store = EvidenceStore.open(
            Path(lake["CITEFLOW_DB"]), settings=StoreSettings(data_path=lake["CITEFLOW_STORE__DATA_PATH"])
        )
        try:
            return ingest(store, jsonl)
        finally:
            store.close()


def describe(phase: Phase) -> str:
    states = ", ".join(f"{count} {state.lower()}" for state, count in sorted(phase.states.items()))
    p95 = percentile(phase.sql_ms, 0.95)
    return (
        f"{phase.runs} runs on {phase.workers} worker(s) in {phase.seconds:.1f} s "
        f"({phase.runs_per_minute:.1f} runs/min; {states}); `citeflow sql` during them: "
        f"{len(phase.sql_ms)} queries, median {phase.sql_median_ms:,.0f} ms, p95 {p95:,.0f} ms, "
        f"{phase.sql_failures} failed; the same query before the runs: median {phase.idle_median_ms:,.0f} ms"
    ) + "".join(f"; a run that did not complete: {message}" for message in sorted(set(phase.failures)))
