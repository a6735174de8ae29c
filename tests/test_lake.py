"""The evidence store as a DuckLake (storage/lake.py): a SQLite catalog on one machine; a real PostgreSQL
catalog with data in an S3-compatible bucket (moto) on loopback for many processes. Skipped, saying why,
only where PostgreSQL is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from lake_servers import S3, Postgres, postgres_bin, postgres_server, s3_server

from citeflow.config import StoreSettings
from citeflow.errors import InputError
from storage.store import EvidenceStore, close_stores

TESTS = Path(__file__).resolve().parent
CITEFLOW = str(Path(sys.executable).parent / "citeflow")
WRITERS = 3
SHARED_PAGES = 8
OWN_PAGES = 3
LAKE_THREADS = 6

needs_postgres = pytest.mark.skipif(
    postgres_bin() is None,
    reason="PostgreSQL is not installed (apt-get install postgresql; scripts/setup dev does it)",
)

CORPUS = [
    {
        "url": "https://rivers.example/alpha",
        "title": "Alpha river",
        "text": "The Alpha river flows through Springfield. The Alpha river is 300 km long.",
    },
    {
        "url": "https://peaks.example/beta",
        "title": "Beta mountain",
        "text": "Beta mountain is the tallest peak near Springfield, at 2,100 metres.",
    },
]


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    if postgres_bin() is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql; scripts/setup dev does it)")
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    with s3_server() as server:
        yield server


def citeflow(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CITEFLOW, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=240)


def lake_env(location: str, data_path: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "CITEFLOW_DB": location, "CITEFLOW_STORE__DATA_PATH": data_path, **(extra or {})}
    return env


def sql(env: dict[str, str], cwd: Path, statement: str) -> list[dict]:
    done = citeflow(["sql", "--json", statement], env, cwd)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def write_corpus(folder: Path) -> Path:
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(record) + "\n" for record in CORPUS))
    return corpus


@pytest.mark.timeout(600)
def test_every_command_works_on_a_sqlite_lake(tmp_path: Path) -> None:
    env = lake_env("ducklake:sqlite:catalog.sqlite", str(tmp_path / "data") + "/")
    corpus = write_corpus(tmp_path)
    first = citeflow(["ingest", str(corpus)], env, tmp_path)
    assert first.returncode == 0, first.stderr
    assert "2 new" in first.stdout
    again = citeflow(["ingest", str(corpus)], env, tmp_path)
    assert "0 new, 0 changed, 2 unchanged" in again.stdout
    run = citeflow(["run", "--json", "How long is the Alpha river?"], env, tmp_path)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["status"] in {"complete", "partial"}
    assert "300 km" in (tmp_path / report["report_path"]).read_text()
    listed = citeflow(["runs"], env, tmp_path)
    assert report["run_id"] in listed.stdout and "complete" in listed.stdout
    [row] = sql(env, tmp_path, "SELECT count(*) AS n, count(DISTINCT id) AS ids FROM pages")
    assert row == {"n": 2, "ids": 2}
    refused = citeflow(["sql", "DELETE FROM pages"], env, tmp_path)
    assert refused.returncode != 0 and "only runs a single read-only SELECT" in refused.stderr
    assert sql(env, tmp_path, "SELECT count(*) AS n FROM pages") == [{"n": 2}]
    outside = citeflow(["sql", f"SELECT * FROM read_text('{corpus}')"], env, tmp_path)
    assert outside.returncode == 1 and "file system operations are disabled" in outside.stderr
    # The catalog and the data files are where the settings say, and no .duckdb file was made.
    assert (tmp_path / "catalog.sqlite").is_file() and (tmp_path / "data").is_dir()
    assert not list(tmp_path.glob("*.duckdb"))

    # Time travel: as the run finished, and before any run.
    finished = sql(env, tmp_path, "SELECT status FROM runs")
    at_end = citeflow(["sql", "--json", "--at", report["run_id"], "SELECT status FROM runs"], env, tmp_path)
    assert at_end.returncode == 0, at_end.stderr
    assert [json.loads(line) for line in at_end.stdout.splitlines()] == finished
    before = citeflow(["sql", "--json", "--at", "2000-01-01 00:00:00", "SELECT 1 AS one"], env, tmp_path)
    assert before.returncode == 1 and "before the lake's first snapshot" in before.stderr

    # Out of the lake into a .duckdb file and back into a new lake: every row, once.
    copied = citeflow(["store", "copy", "ducklake:sqlite:catalog.sqlite", "copy.duckdb"], env, tmp_path)
    assert copied.returncode == 0, copied.stderr
    counts = copy_counts(copied.stdout)
    assert counts["pages"] == 2 and counts["runs"] == 1 and counts["claims"] > 0
    again = citeflow(["store", "copy", "ducklake:sqlite:catalog.sqlite", "copy.duckdb"], env, tmp_path)
    assert set(copy_counts(again.stdout).values()) == {0}
    file_env = {**env, "CITEFLOW_DB": str(tmp_path / "copy.duckdb")}
    assert sql(file_env, tmp_path, "SELECT count(*) AS n FROM claims") == [{"n": counts["claims"]}]
    no_lake = citeflow(["sql", "--at", report["run_id"], "SELECT 1"], file_env, tmp_path)
    assert no_lake.returncode == 1 and "this store is a .duckdb file" in no_lake.stderr
    back_env = {**env, "CITEFLOW_STORE__DATA_PATH": str(tmp_path / "back") + "/"}
    back = citeflow(["store", "copy", "copy.duckdb", "ducklake:back.ducklake"], back_env, tmp_path)
    assert copy_counts(back.stdout) == counts

    # Compaction (flows/maintenance.py): old snapshots go, every row stays.
    lake = EvidenceStore(Path(f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"))
    done = lake.compact(keep_days=0)
    assert done["snapshots_expired"] > 0 and done["files_after"] > 0
    assert sql(env, tmp_path, "SELECT count(*) AS n FROM pages") == [{"n": 2}]
    with pytest.raises(InputError, match="compaction is for a DuckLake store"):
        EvidenceStore(tmp_path / "copy.duckdb").compact(keep_days=0)


def test_threads_of_one_process_share_a_sqlite_lake_without_lock_errors(tmp_path: Path) -> None:
    """Mapped tasks are threads: each commits runs and reads them back through its own cursor, as verify
    tasks do. SQLite refuses a reader while another connection commits unless the catalog waits."""
    store = EvidenceStore(
        Path(f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"),
        settings=StoreSettings(data_path=str(tmp_path / "data") + "/"),
    )
    runs_each = 6

    def work(thread: int) -> int:
        for n in range(runs_each):
            store.start_run(f"t{thread}-{n}", f"question {thread} {n}", "extractive", "local", "{}")
            store.recent_runs(limit=3)
        return thread

    try:
        with ThreadPoolExecutor(max_workers=LAKE_THREADS) as pool:
            finished = list(pool.map(work, range(LAKE_THREADS)))
        assert finished == list(range(LAKE_THREADS))
        assert len(store.recent_runs()) == LAKE_THREADS * runs_each
    finally:
        close_stores()


def copy_counts(stdout: str) -> dict[str, int]:
    return {line.split()[0]: int(line.split()[1]) for line in stdout.splitlines() if "rows copied" in line}


@needs_postgres
def test_concurrent_writers_lose_and_double_nothing(postgres: Postgres, s3: S3, tmp_path: Path) -> None:
    """Several processes store the same pages at once on a PostgreSQL catalog with data in S3: every
    page id is stored once, every run keeps all its claims, and every claim's quote is on its page."""
    postgres.create_database("writers")
    location = postgres.location("writers")
    env = lake_env(location, f"s3://{s3.bucket}/writers/", s3.env())
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                str(TESTS / "lake_writer.py"),
                location,
                f"w{n}",
                str(SHARED_PAGES),
                str(OWN_PAGES),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(WRITERS)
    ]
    for writer in writers:
        out, err = writer.communicate(timeout=240)
        assert writer.returncode == 0 and out.strip() == "done", err
    [pages] = sql(env, tmp_path, "SELECT count(*) AS n, count(DISTINCT id) AS ids FROM pages")
    assert pages == {"n": SHARED_PAGES + WRITERS * OWN_PAGES, "ids": SHARED_PAGES + WRITERS * OWN_PAGES}
    per_run = sql(
        env,
        tmp_path,
        "SELECT run_id, count(*) AS claims, count(DISTINCT id) AS ids, count(s.source_id) AS cited "
        "FROM claims LEFT JOIN sources s USING (run_id, page_id) GROUP BY run_id ORDER BY run_id",
    )
    each = SHARED_PAGES + OWN_PAGES
    assert per_run == [
        {"run_id": f"w{n}", "claims": each, "ids": each, "cited": each} for n in range(WRITERS)
    ]
    [audit] = sql(
        env,
        tmp_path,
        "SELECT count(*) AS bad FROM claims c LEFT JOIN pages p ON p.id = c.page_id "
        "WHERE p.id IS NULL OR p.content_hash <> c.page_hash "
        "OR substr(p.text, c.quote_start + 1, c.quote_end - c.quote_start) <> c.quote",
    )
    assert audit == {"bad": 0}
    assert sql(env, tmp_path, "SELECT count(*) AS n FROM runs WHERE status = 'complete'") == [{"n": WRITERS}]
    close_stores()
