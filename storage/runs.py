"""The tables of a run's course: `runs` (one row per run, with its report), `subquestions` (the plan),
`search_results` (everything a search returned) and `run_sources` (the pages the run read)."""

from __future__ import annotations

from datetime import datetime

import duckdb
from pydantic import BaseModel

from citeflow.contracts import ProcessId, RunMetrics, RunSource, RunStatus, SearchResult, SubQuestion
from citeflow.errors import StoreError
from storage.rows import columns, insert, named_rows, select, utc_now


class RunSummary(BaseModel):
    """One line of `citeflow runs`."""

    run_id: str
    question: str
    status: RunStatus
    started_at: datetime
    wall_seconds: float | None


def start(
    cur: duckdb.DuckDBPyConnection,
    run_id: str,
    question: str,
    engine: str,
    search: str,
    settings_json: str,
    settings_hash: str,
    owner: ProcessId | None,
    topic: str | None,
) -> None:
    process = owner.model_dump() if owner else {"pid": None, "host": None, "started": None}
    cur.execute(
        "INSERT INTO runs (run_id, question, status, engine, search, settings, settings_hash, started_at, "
        "pid, host, process_started, topic) VALUES ($run_id, $question, $status, $engine, $search, "
        "$settings, $settings_hash, $started_at, $pid, $host, $started, $topic)",
        {
            "run_id": run_id,
            "question": question,
            "status": RunStatus.running.value,
            "engine": engine,
            "search": search,
            "settings": settings_json,
            "settings_hash": settings_hash,
            "started_at": utc_now(),
            "topic": topic,
            **process,
        },
    )


def end(cur: duckdb.DuckDBPyConnection, run_id: str, status: RunStatus, why: str) -> bool:
    """End a run still `running`, with no report; False when it had ended already."""
    now = utc_now()
    ended = cur.execute(
        "UPDATE runs SET status = ?, ended_at = ?, report_markdown = ?, "
        "wall_seconds = date_diff('millisecond', started_at, ?) / 1000 "
        "WHERE run_id = ? AND status = ?",
        [status.value, now, why, now, run_id, RunStatus.running.value],
    ).fetchone()
    return bool(ended and ended[0])  # the count of rows updated (DuckLake has no UPDATE ... RETURNING)


def running(cur: duckdb.DuckDBPyConnection) -> dict[str, ProcessId | None]:
    """Runs still marked `running`, with the process that runs each (None for rows older than that)."""
    rows = named_rows(
        cur,
        "SELECT run_id, pid, host, process_started AS started FROM runs WHERE status = ?",
        [RunStatus.running],
    )
    return {
        row.pop("run_id"): ProcessId.model_validate(row) if row["pid"] is not None else None for row in rows
    }


def recent(cur: duckdb.DuckDBPyConnection, limit: int | None, topic: str | None) -> list[RunSummary]:
    return select(
        cur,
        RunSummary,
        f"SELECT {columns(RunSummary)} FROM runs WHERE $topic IS NULL OR topic = $topic "
        "ORDER BY started_at DESC LIMIT $limit",
        {"topic": topic, "limit": limit},
    )


def finish(
    cur: duckdb.DuckDBPyConnection,
    run_id: str,
    status: RunStatus,
    report_markdown: str,
    report_path: str | None,
    metrics: RunMetrics,
    report_kind: str = "answer",
) -> None:
    updated = cur.execute(
        "UPDATE runs SET status = ?, ended_at = ?, wall_seconds = ?, report_markdown = ?, "
        "report_path = ?, metrics = ?, report_kind = ? WHERE run_id = ?",
        [
            status.value,
            utc_now(),
            metrics.wall_seconds,
            report_markdown,
            report_path,
            metrics.model_dump_json(),
            report_kind,
            run_id,
        ],
    ).fetchone()
    if not (updated and updated[0]):  # the count of rows updated
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


def add_sources(cur: duckdb.DuckDBPyConnection, sources: list[RunSource]) -> None:
    insert(cur, "run_sources", sources, omit=("source_id",))  # numbered in `sources` (storage/claims.py)


def sources(cur: duckdb.DuckDBPyConnection, run_id: str) -> list[RunSource]:
    """The pages the run read, in plan order, then search rank."""
    return select(
        cur,
        RunSource,
        f"SELECT {columns(RunSource, 'rs', omit=('source_id',))}, s.source_id FROM run_sources rs "
        "LEFT JOIN sources s ON s.run_id = rs.run_id AND s.page_id = rs.page_id "
        "LEFT JOIN subquestions sq ON sq.run_id = rs.run_id AND sq.id = rs.subquestion_id "
        "WHERE rs.run_id = ? ORDER BY sq.position NULLS LAST, rs.subquestion_id, rs.rank, rs.page_id",
        [run_id],
    )
