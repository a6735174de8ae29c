"""The tables of how a run went: `traces` (one row per step: stage, actor, times, outcome) and `errors`
(what went wrong without stopping the run; they become the report's caveats)."""

from __future__ import annotations

import duckdb

from citeflow.contracts import RunError, Trace
from storage.rows import columns, insert, select, utc_now


def add_trace(cur: duckdb.DuckDBPyConnection, trace: Trace) -> None:
    insert(cur, "traces", [trace])


def add_error(cur: duckdb.DuckDBPyConnection, error: RunError) -> None:
    insert(cur, "errors", [error], recorded_at=utc_now())


def errors(cur: duckdb.DuckDBPyConnection, run_id: str) -> list[RunError]:
    return select(
        cur,
        RunError,
        f"SELECT {columns(RunError)} FROM errors WHERE run_id = ? ORDER BY recorded_at",
        [run_id],
    )
