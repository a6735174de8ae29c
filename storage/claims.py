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
    sources = [Source(id=f"S{number}", **row) for number, row in enumerate(cited, start=1)]
    # On a lake an UPDATE conflicts with other runs' inserts into its table until it commits: one short
    # statement a table, not one a source, keeps the transaction short enough to commit while many write.
    number, parameters = _lookup("run_sources", "page_id", {s.page_id: s.id for s in sources})
    cur.execute(f"UPDATE run_sources SET source_id = {number} WHERE run_id = ?", [*parameters, run_id])
    number, parameters = _lookup("claims", "page_id", {s.page_id: s.id for s in sources})
    cur.execute(
        f"UPDATE claims SET source_id = CASE WHEN status = ? THEN {number} END WHERE run_id = ?",
        [ClaimStatus.verified.value, *parameters, run_id],
    )
    return sources


def renumber_sources(cur: duckdb.DuckDBPyConnection, run_id: str, numbers: dict[str, str]) -> None:
    """Replace each source id of the run (old -> new) in claims and run_sources, one statement a table."""
    for table in ("claims", "run_sources"):
        new, parameters = _lookup(table, "source_id", numbers)
        cur.execute(
            f"UPDATE {table} SET source_id = coalesce({new}, source_id) "
            "WHERE run_id = ? AND source_id IS NOT NULL",
            [*parameters, run_id],
        )


def _lookup(table: str, column: str, ids: dict[str, str]) -> tuple[str, list[str]]:
    """An SQL expression for the id `ids` gives a row's `column` (NULL where it gives none), and its
    parameters."""
    if not ids:
        return "NULL", []
    rows = ", ".join("(?, ?)" for _ in ids)
    expression = f"(SELECT n.id FROM (VALUES {rows}) AS n(key, id) WHERE n.key = {table}.{column})"
    return expression, [item for pair in ids.items() for item in pair]


def add_sentences(cur: duckdb.DuckDBPyConnection, sentences: list[ReportSentence]) -> None:
    insert(cur, "report_sentences", sentences)


def sentences(cur: duckdb.DuckDBPyConnection, run_id: str) -> list[ReportSentence]:
    """The run's report sentences, kept and removed, in report order."""
    sql = f"SELECT {columns(ReportSentence)} FROM report_sentences WHERE run_id = ? ORDER BY position"
    return select(cur, ReportSentence, sql, [run_id])
