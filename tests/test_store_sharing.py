"""Several processes on one store file: each holds it only while it reads or writes, waits (bounded,
reported) while another holds it, and leaves every finished write in the .duckdb file itself."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from citeflow.config import StoreSettings
from citeflow.contracts import Origin, PageInput, RunMetrics, RunStatus
from citeflow.errors import StoreError
from storage.store import EvidenceStore, close_stores, get_store, read_only_query

TESTS = Path(__file__).resolve().parent
CITEFLOW = str(Path(sys.executable).parent / "citeflow")


def page(n: int) -> PageInput:
    return PageInput(url=f"https://example.org/{n}", title=f"P{n}", text=f"Page {n}.", origin=Origin.fetched)


def another_process_can_open(path: Path) -> bool:
    """Whether a second process could open the file read-write right now (no waiting)."""
    opened = subprocess.run(
        [sys.executable, "-c", f"import duckdb; duckdb.connect({str(path)!r}).close()"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert opened.returncode == 0 or "Could not set lock" in opened.stderr, opened.stderr
    return opened.returncode == 0


@contextmanager
def held_by_another_process(path: Path) -> Iterator[subprocess.Popen]:
    """A process holding the file read-write (as citeflow once did for a whole run) until the block ends."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, sys; c = duckdb.connect({str(path)!r}); print('held', flush=True); "
            "sys.stdin.readline(); c.close()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.communicate("done\n", timeout=30)


def start_writer(db: Path, tag: str) -> subprocess.Popen:
    """tests/store_writer.py writing like a run until rounds_written() stops it."""
    writer = subprocess.Popen(
        [sys.executable, str(TESTS / "store_writer.py"), str(db), tag],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None and writer.stdout.readline().strip() == "started", writer.stderr
    return writer


def rounds_written(writer: subprocess.Popen) -> int:
    out, err = writer.communicate("stop\n", timeout=120)
    assert writer.returncode == 0, err
    return int(out.split()[-1])


def test_the_file_is_held_only_inside_a_method_or_session(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "store.duckdb")
    store.put_page(page(1))
    assert not store.file_is_open
    assert another_process_can_open(store.path)
    with store.session():
        store.put_page(page(2))
        assert store.file_is_open
        assert not another_process_can_open(store.path)
        with store.session():  # sessions nest
            assert store.page_count() == 2
        assert store.file_is_open
    assert not store.file_is_open
    assert another_process_can_open(store.path)


def test_a_finished_run_is_in_the_duckdb_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    store = get_store(path)
    store.start_run("run-1", "Why is the sky blue?", "extractive", "local", "{}")
    store.put_page(page(1))
    store.finish_run("run-1", RunStatus.complete, "# Report", None, RunMetrics(wall_seconds=1.0))
    assert not Path(f"{path}.wal").exists()

    copy = tmp_path / "elsewhere" / "copy.duckdb"
    copy.parent.mkdir()
    shutil.copy(path, copy)  # the .duckdb file only, as a person copying their store would

    assert read_only_query(copy, "SELECT run_id, status FROM runs") == (
        ["run_id", "status"],
        [("run-1", "complete")],
    )
    close_stores()


def test_citeflow_sql_answers_while_another_process_writes(tmp_path: Path) -> None:
    db = tmp_path / "store.duckdb"
    EvidenceStore.open(db)
    writer = start_writer(db, "w")
    try:
        started = time.monotonic()
        answered = subprocess.run(
            [CITEFLOW, "sql", "SELECT count(*) AS traces FROM traces", "--db", str(db), "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        took = time.monotonic() - started
        still_writing = writer.poll() is None
    finally:
        rounds = rounds_written(writer)

    assert answered.returncode == 0, answered.stderr
    assert '"traces"' in answered.stdout and still_writing
    assert took < 30, f"citeflow sql took {took:.1f} s while a writer was writing"
    assert read_only_query(db, "SELECT count(*) FROM traces WHERE run_id = 'w'")[1] == [(rounds,)]


def test_two_writing_processes_both_keep_all_their_rows(tmp_path: Path) -> None:
    db = tmp_path / "store.duckdb"
    EvidenceStore.open(db)
    first = start_writer(db, "a")
    second = start_writer(db, "b")
    time.sleep(4)  # both write at once meanwhile
    written = {"a": rounds_written(first), "b": rounds_written(second)}

    traces = dict(read_only_query(db, "SELECT run_id, count(*) FROM traces GROUP BY run_id")[1])
    pages = dict(
        read_only_query(db, "SELECT split_part(url, '.', 1)[9:], count(*) FROM pages GROUP BY ALL")[1]
    )
    assert traces == written and pages == written, (traces, pages, written)
    # They took turns with the file, rather than one waiting for the other to finish: b got it while a
    # was writing, and a got it back.
    order = [tag for (tag,) in read_only_query(db, "SELECT run_id FROM traces ORDER BY started_at")[1]]
    turns = sum(1 for before, after in zip(order, order[1:], strict=False) if before != after)
    assert turns >= 2, order


def test_a_wait_for_a_held_file_is_reported_once_and_bounded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.duckdb"
    EvidenceStore.open(path).close()
    caplog.set_level(logging.WARNING, logger="citeflow.store")
    with held_by_another_process(path) as holder:
        started = time.monotonic()
        with pytest.raises(StoreError) as raised:
            EvidenceStore.open(path, settings=StoreSettings(wait_seconds=1.5))
        waited = time.monotonic() - started
    message = str(raised.value)
    assert f"is held by another process (PID {holder.pid}) and was not released within 1.5 s" in message
    assert "CITEFLOW_STORE__WAIT_SECONDS" in message and "the store is unchanged" in message
    assert 1.5 <= waited < 5
    waits = [record.getMessage() for record in caplog.records if record.name == "citeflow.store"]
    assert waits == [f"{path} is held by another process (PID {holder.pid}); waiting up to 1.5 s for it"]


def test_a_wait_ends_as_soon_as_the_other_process_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    EvidenceStore.open(path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, time; c = duckdb.connect({str(path)!r}); print('held', flush=True); "
            "time.sleep(1.5); c.close()",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    started = time.monotonic()
    store = EvidenceStore.open(path, settings=StoreSettings(wait_seconds=30))
    waited = time.monotonic() - started
    holder.wait(timeout=30)

    store.put_page(page(1))
    assert store.page_count() == 1
    assert 0.5 < waited < 10


def test_citeflow_sql_reports_its_wait_and_gives_up_in_one_line_each(tmp_path: Path) -> None:
    db = tmp_path / "store.duckdb"
    EvidenceStore.open(db).close()
    with held_by_another_process(db) as holder:
        refused = subprocess.run(
            [CITEFLOW, "sql", "SELECT 1", "--db", str(db)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "CITEFLOW_STORE__WAIT_SECONDS": "2"},
        )
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 1
    assert lines == [
        f"waiting: {db} is held by another process (PID {holder.pid}); waiting up to 2 s for it",
        f"error: {db}: is held by another process (PID {holder.pid}) and was not released within 2 s; "
        "try again when it finishes, or allow a longer wait with CITEFLOW_STORE__WAIT_SECONDS "
        "(the store is unchanged)",
    ]
