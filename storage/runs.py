"""The tables of a run's course: `runs` (one row per run, with its report), `subquestions` (the plan),
`search_results` (everything a search returned) and `run_sources` (the pages the run read)."""

from __future__ import annotations

import duckdb

from citeflow.contracts import RunMetrics, RunSource, RunStatus, SearchResult, SubQuestion
from citeflow.errors import StoreError
from storage.rows import columns, insert, select, utc_now


def start(
    cur: duckdb.DuckDBPyConnection, run_id: str, question: str, engine: str, search: str, settings_json: str
) -> None:
    cur.execute(
        "INSERT INTO runs (run_id, question, status, engine, search, settings, started_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [run_id, question, RunStatus.running.value, engine, search, settings_json, utc_now()],
    )


def finish(
    cur: duckdb.DuckDBPyConnection,
    run_id: str,
    status: RunStatus,
    report_markdown: str,
    report_path: str | None,
    metrics: RunMetrics,
) -> None:
    updated = cur.execute(
        "UPDATE runs SET status = ?, ended_at = ?, wall_seconds = ?, report_markdown = ?, "
        "report_path = ?, metrics = ? WHERE run_id = ? RETURNING run_id",
        [
            status.value,
            utc_now(),
            metrics.wall_seconds,
            report_markdown,
            report_path,
            metrics.model_dump_json(),
            run_id,
        ],
    ).fetchall()
    if not updated:
        raise StoreError(f"run {run_id}", "was never started, so it cannot be finished", "no row was written")


def add_subquestions(cur: duckdb.DuckDBPyConnection, run_id: str, subquestions: list[SubQuestion]) -> None:
    insert(cur, "subquestions", subquestions, run_id=run_id)


def subquestions(cur: duckdb.DuckDBPyConnection, run_id: str) -> list[SubQuestion]:
    return select(
        cur,
        SubQuestion,
        f"SELECT {columns(SubQuestion)} FROM subquestions WHERE run_id = ? ORDER BY position, id",
        [run_id],
    )


def add_search_results(
    cur: duckdb.DuckDBPyConnection, run_id: str, subquestion_id: str, results: list[SearchResult]
) -> None:
    insert(cur, "search_results", results, run_id=run_id, subquestion_id=subquestion_id)


def add_source(cur: duckdb.DuckDBPyConnection, source: RunSource) -> None:
    insert(cur, "run_sources", [source])


def sources(cur: duckdb.DuckDBPyConnection, run_id: str) -> list[RunSource]:
    """The pages the run read, in plan order, then search rank."""
    return select(
        cur,
        RunSource,
        f"SELECT {columns(RunSource, 'rs')} FROM run_sources rs LEFT JOIN subquestions sq "
        "ON sq.run_id = rs.run_id AND sq.id = rs.subquestion_id "
        "WHERE rs.run_id = ? ORDER BY sq.position NULLS LAST, rs.subquestion_id, rs.rank, rs.page_id",
        [run_id],
    )
