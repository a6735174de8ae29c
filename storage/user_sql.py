"""`citeflow sql`: one read-only SELECT a person typed, bounded in time and memory.

Belt and braces: the statement is parsed and refused unless it is exactly one SELECT; it runs in a
transaction that is always rolled back; its connection has external file access switched off (see
SharedFile.load_fts), so it can read or write no file but the store. A timer interrupts it when it runs
past its time, and the connection `citeflow sql` opens has a DuckDB memory_limit, which the process
itself is held to while the query runs (`bounded_memory`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from citeflow.config import MEMORY_SIZE, StoreSettings
from citeflow.errors import InputError
from storage.files import first_line

UNCHANGED = "the store is unchanged"


def _parser() -> duckdb.DuckDBPyConnection:
    # A bare in-memory connection: with fts not loaded and autoloading off, parsing a PRAGMA
    # that calls an extension fails instead of running or downloading anything.
    return duckdb.connect(
        ":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )


def check_read_only_sql(sql: str) -> None:
    """Raise InputError unless `sql` is exactly one SELECT.

    SHOW, DESCRIBE, SUMMARIZE and pragmas that only read (PRAGMA version) parse as SELECT too.
    """
    if not sql.strip():
        raise InputError("SQL", "the statement is empty", UNCHANGED)
    parser = _parser()
    try:
        statements = parser.extract_statements(sql)
    except duckdb.Error as error:
        raise InputError(
            "SQL", f"is not a statement citeflow can run read-only: {error}", UNCHANGED
        ) from error
    finally:
        parser.close()
    if len(statements) != 1:
        raise InputError("SQL", f"has {len(statements)} statements; give exactly one SELECT", UNCHANGED)
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise InputError(
            "SQL",
            f"is a {kind.name} statement; `citeflow sql` only runs a single read-only SELECT",
            UNCHANGED,
        )


# Rows are read this many at a time, so at most this many rows beyond the byte cap are ever held.
FETCH_BATCH = 32


class SelectedRows(list[tuple]):
    """The rows a SELECT returned, up to the caps; `cut` says why there may be more ('' when none)."""

    cut: str = ""


def run_select(
    cur: duckdb.DuckDBPyConnection, sql: str, settings: StoreSettings
) -> tuple[list[str], list[tuple]]:
    """Run a checked SELECT on `cur` inside a transaction that is rolled back, stopped at the time limit
    and at its memory limit (`bounded_memory`); its rows read a few at a time up to settings.sql_max_rows
    and sql_max_bytes (a SelectedRows)."""
    timer = threading.Timer(settings.sql_timeout_seconds, cur.interrupt)
    timer.daemon = True
    cur.begin()
    timer.start()
    try:
        with bounded_memory(settings.sql_memory_limit):
            cur.execute(sql)
            names = [description[0] for description in cur.description or []]
            rows = capped_rows(cur, settings)
    except duckdb.InterruptException as error:
        raise InputError(
            "SQL",
            f"ran longer than {settings.sql_timeout_seconds:g} s and was stopped "
            "(give --timeout SECONDS to allow longer)",
            UNCHANGED,
        ) from error
    except (duckdb.OutOfMemoryException, MemoryError) as error:
        raise InputError(
            "SQL",
            f"needed more memory than its limit of {settings.sql_memory_limit} and was stopped "
            "(give --memory-limit SIZE, e.g. 4GB, to allow more)",
            UNCHANGED,
        ) from error
    except duckdb.Error as error:
        raise InputError("SQL", f"failed: {first_line(error)}", UNCHANGED) from error
    finally:
        timer.cancel()
        cur.rollback()
    return names, rows


def size_in_bytes(size: str) -> int:
    """A size as DuckDB spells it (MEMORY_SIZE: "1GB", "512 MiB") in bytes: KB is 1000 bytes, KiB 1024."""
    found = re.match(MEMORY_SIZE, size)
    if not found:
        raise ValueError(f"not a memory size: {size!r}")
    number, unit = found.groups()
    power = "BKMGT".index(unit[0])
    return int(float(number) * (1024 if unit.endswith("iB") else 1000) ** power)


@contextmanager
def bounded_memory(limit: str) -> Iterator[None]:
    """For the block, this process may take at most `limit` more memory than it holds now (on Linux, by
    RLIMIT_DATA over its current data size; elsewhere nothing changes). DuckDB's memory_limit bounds its
    buffer pool, not the strings a query's vectors build: `SELECT repeat('x', 1000000) FROM range(1500)`
    held 1.5 GB in one vector and the process reached 1.7 GB. Past the bound, DuckDB's allocation (or
    Python's) fails as out of memory, and the query is stopped."""
    status = Path("/proc/self/status")
    held = re.search(r"^VmData:\s+(\d+) kB", status.read_text(), re.MULTILINE) if status.exists() else None
    if held is None:
        yield
        return
    import resource  # Unix only; with /proc, this is Linux

    before = resource.getrlimit(resource.RLIMIT_DATA)
    bound = int(held.group(1)) * 1024 + size_in_bytes(limit)
    if before[0] != resource.RLIM_INFINITY:
        bound = min(bound, before[0])
    resource.setrlimit(resource.RLIMIT_DATA, (bound, before[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, before)


def capped_rows(cur: duckdb.DuckDBPyConnection, settings: StoreSettings) -> SelectedRows:
    """The result's rows until it ends or a cap is reached; the text of the values counts as bytes."""
    rows = SelectedRows()
    size = 0
    while batch := cur.fetchmany(FETCH_BATCH):
        for row in batch:
            if len(rows) == settings.sql_max_rows:
                rows.cut = f"the first {len(rows):,} rows (give --max-rows N for more)"
                return rows
            size += sum(len(str(value)) for value in row if value is not None)
            if size > settings.sql_max_bytes:
                rows.cut = (
                    f"the first {len(rows):,} rows: the next would pass {settings.sql_max_bytes:,} "
                    "characters of values (select fewer columns or rows)"
                )
                return rows
            rows.append(row)
    return rows
