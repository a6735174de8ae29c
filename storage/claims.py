"""The tables of what a run found and wrote: `claims` (every claim checked, verified or rejected, and the
source it is cited as) and `report_sentences` (every sentence of the final check, kept or removed)."""

from __future__ import annotations

import re

import duckdb

from citeflow.contracts import Claim, ClaimStatus, ReportSentence, Source
from storage.rows import columns, insert, named_rows, select


def _natural_key(identifier: str) -> tuple[str, int, str]:
    """C2 before C10: the prefix, then the number, then the raw id as a tie-break."""
    match = re.fullmatch(r"(\D*)(\d+)", identifier)
    if match is None:
        return (identifier, -1, identifier)
    return (match.group(1), int(match.group(2)), identifier)


def add(cur: duckdb.DuckDBPyConnection, run_id: str, claims: list[Claim]) -> None:
    insert(cur, "claims", claims, run_id=run_id)


def of_run(cur: duckdb.DuckDBPyConnection, run_id: str, status: ClaimStatus | None) -> list[Claim]:
    """The run's claims, C1, C2, ... C10 in natural order; only those with `status` if given."""
    sql = f"SELECT {columns(Claim)} FROM claims WHERE run_id = ?"
    params: list[str] = [run_id]
    if status is not None:
        sql += " AND status = ?"
        params.append(status.value)
    return sorted(select(cur, Claim, sql, params), key=lambda claim: _natural_key(claim.id))


def number_sources(cur: duckdb.DuckDBPyConnection, run_id: str) -> list[Source]:
    """Number S1, S2, ... the pages with at least one verified claim, in report order (inside the
    caller's transaction).

    Order is the first (sub-question position, search rank) at which the run read the page.
    Running it again renumbers from scratch, so it is safe to call after more claims arrive.
    """
    cited = named_rows(
        cur,
        """
        WITH cited AS (
            SELECT DISTINCT page_id FROM claims WHERE run_id = $run AND status = $verified
        ),
        first_read AS (
            SELECT rs.page_id, min(sq.position) AS position, min(rs.rank) AS rank
            FROM run_sources rs
            JOIN subquestions sq ON sq.run_id = rs.run_id AND sq.id = rs.subquestion_id
            WHERE rs.run_id = $run
            GROUP BY rs.page_id
        )
        SELECT p.id AS page_id, p.url, p.title, p.stored_at
        FROM cited c
        JOIN pages p ON p.id = c.page_id
        LEFT JOIN first_read f ON f.page_id = c.page_id
        ORDER BY f.position NULLS LAST, f.rank NULLS LAST, p.id
        """,
        {"run": run_id, "verified": ClaimStatus.verified.value},
    )
    cur.execute("UPDATE run_sources SET source_id = NULL WHERE run_id = ?", [run_id])
    cur.execute("UPDATE claims SET source_id = NULL WHERE run_id = ?", [run_id])
    sources = [Source(id=f"S{number}", **row) for number, row in enumerate(cited, start=1)]
    for source in sources:
        cur.execute(
            "UPDATE run_sources SET source_id = ? WHERE run_id = ? AND page_id = ?",
            [source.id, run_id, source.page_id],
        )
        cur.execute(
            "UPDATE claims SET source_id = ? WHERE run_id = ? AND page_id = ? AND status = ?",
            [source.id, run_id, source.page_id, ClaimStatus.verified.value],
        )
    return sources


def renumber_sources(cur: duckdb.DuckDBPyConnection, run_id: str, numbers: dict[str, str]) -> None:
    """Replace each source id of the run (old -> new) in claims and run_sources."""
    for table in ("claims", "run_sources"):
        # Through a prefix no id has, so that S2 -> S1 never meets the S1 -> S2 of the same pass.
        cur.execute(
            f"UPDATE {table} SET source_id = '~' || source_id WHERE run_id = ? AND source_id IS NOT NULL",
            [run_id],
        )
        for old, new in numbers.items():
            cur.execute(
                f"UPDATE {table} SET source_id = ? WHERE run_id = ? AND source_id = ?",
                [new, run_id, f"~{old}"],
            )


def add_sentences(cur: duckdb.DuckDBPyConnection, sentences: list[ReportSentence]) -> None:
    insert(cur, "report_sentences", sentences)


def sentences(cur: duckdb.DuckDBPyConnection, run_id: str) -> list[ReportSentence]:
    """The run's report sentences, kept and removed, in report order."""
    sql = f"SELECT {columns(ReportSentence)} FROM report_sentences WHERE run_id = ? ORDER BY position"
    return select(cur, ReportSentence, sql, [run_id])
