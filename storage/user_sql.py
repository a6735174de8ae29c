"""`citeflow sql`: one read-only SELECT a person typed, bounded in time and memory.

Belt and braces: the statement is parsed and refused unless it is exactly one SELECT; it runs in a
transaction that is always rolled back; its connection has external file access switched off (see
SharedFile.load_fts), so it can read or write no file but the store. A timer interrupts it when it runs
past its time, and the connection `citeflow sql` opens has a DuckDB memory_limit.
"""

from __future__ import annotations

import threading

import duckdb

from citeflow.config import StoreSettings
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


def run_select(
    cur: duckdb.DuckDBPyConnection, sql: str, settings: StoreSettings
) -> tuple[list[str], list[tuple]]:
    """Run a checked SELECT on `cur` inside a transaction that is rolled back, stopped at the time limit."""
    timer = threading.Timer(settings.sql_timeout_seconds, cur.interrupt)
    timer.daemon = True
    cur.begin()
    timer.start()
    try:
        cur.execute(sql)
        rows = cur.fetchall()
        names = [description[0] for description in cur.description or []]
    except duckdb.InterruptException as error:
        raise InputError(
            "SQL",
            f"ran longer than {settings.sql_timeout_seconds:g} s and was stopped "
            "(give --timeout SECONDS to allow longer)",
            UNCHANGED,
        ) from error
    except duckdb.OutOfMemoryException as error:
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
