"""The tables of what a run found and wrote: `claims` (every claim checked, verified or rejected),
`source_numbers` (the source ids a run gave its cited pages) and `report_sentences` (every sentence of the
final check, kept or removed).

None of them is ever updated, only inserted into: on a lake an update conflicts with every other run's
inserts into the same table (see migrations.m006_source_numbers). A claim's source id is therefore not a
column of `claims` but read through the view `sources`, the run's latest numbering."""

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


# A claim is cited as the source its page was numbered, once verified.
_CLAIM_SOURCE = "CASE WHEN c.status = 'verified' THEN s.source_id END AS source_id"


def add(cur: duckdb.DuckDBPyConnection, run_id: str, claims: list[Claim]) -> None:
    insert(cur, "claims", claims, omit=("source_id",), run_id=run_id)


def of_run(cur: duckdb.DuckDBPyConnection, run_id: str, status: ClaimStatus | None) -> list[Claim]:
    """The run's claims, C1, C2, ... C10 in natural order; only those with `status` if given."""
    sql = (
        f"SELECT {columns(Claim, 'c', omit=('source_id',))}, {_CLAIM_SOURCE} FROM claims c "
        "LEFT JOIN sources s ON s.run_id = c.run_id AND s.page_id = c.page_id WHERE c.run_id = ?"
    )
    params: list[str] = [run_id]
    if status is not None:
        sql += " AND c.status = ?"
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
    _add_numbering(cur, run_id, {source.page_id: source.id for source in sources})
    return sources


def renumber_sources(cur: duckdb.DuckDBPyConnection, run_id: str, numbers: dict[str, str]) -> None:
    """Give the run's sources new ids (old id -> new id), as a new numbering of the run."""
    current = cur.execute("SELECT page_id, source_id FROM sources WHERE run_id = ?", [run_id]).fetchall()
    _add_numbering(cur, run_id, {page_id: numbers.get(old, old) for page_id, old in current})


def _add_numbering(cur: duckdb.DuckDBPyConnection, run_id: str, source_ids: dict[str, str]) -> None:
    """Store {page id: source id} as the run's next numbering, which `sources` then shows."""
    if not source_ids:
        return
    (latest,) = cur.execute(  # type: ignore[misc]
        "SELECT coalesce(max(numbering), 0) FROM source_numbers WHERE run_id = ?", [run_id]
    ).fetchone()
    cur.executemany(
        "INSERT INTO source_numbers (run_id, numbering, page_id, source_id) VALUES (?, ?, ?, ?)",
        [[run_id, latest + 1, page_id, source_id] for page_id, source_id in source_ids.items()],
    )


def add_sentences(cur: duckdb.DuckDBPyConnection, sentences: list[ReportSentence]) -> None:
    insert(cur, "report_sentences", sentences)


def sentences(cur: duckdb.DuckDBPyConnection, run_id: str) -> list[ReportSentence]:
    """The run's report sentences, kept and removed, in report order."""
    sql = f"SELECT {columns(ReportSentence)} FROM report_sentences WHERE run_id = ? ORDER BY position"
    return select(cur, ReportSentence, sql, [run_id])
