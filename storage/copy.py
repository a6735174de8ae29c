"""`citeflow store copy SRC DST`: every row of one store into another (a .duckdb file into a lake, or
back), page versions, runs, claims and model calls included.

Rows already in DST are not copied again, so a second copy adds nothing: pages by id and runs by run_id
(a lake keeps no primary key, so a page must never arrive twice), every other table by the whole row.
The full-text index and the migration log are not copied: each store has its own.
"""

from __future__ import annotations

import tempfile
from functools import partial
from pathlib import Path

import duckdb

from storage.store import EvidenceStore

# Tables and the columns that say a row is already there; None: the whole row does.
TABLES: dict[str, list[str] | None] = {
    "pages": ["id"],
    "runs": ["run_id"],
    "subquestions": None,
    "search_results": None,
    "run_sources": None,
    "claims": None,
    "source_numbers": None,
    "report_sentences": None,
    "model_calls": None,
    "traces": None,
    "errors": None,
}


def _columns(cur: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    return [
        row[0]
        for row in cur.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_catalog = current_database() "
            "AND table_schema = 'main' AND table_name = ? ORDER BY ordinal_position",
            [table],
        ).fetchall()
    ]


def copy_store(source: EvidenceStore, target: EvidenceStore) -> dict[str, int]:
    """Copy what `target` lacks from `source`, one transaction per table; the rows copied per table.

    Each table passes through a Parquet file in a temporary folder: the two stores are two DuckDB
    databases (one may be a lake), and Parquet keeps every column's type (lists, JSON, timestamps)."""
    copied: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="citeflow-copy-") as folder:
        for table, key in TABLES.items():
            parquet = Path(folder) / f"{table}.parquet"
            with source.cursor() as cur:
                names = ", ".join(_columns(cur, table))
                cur.execute(f"COPY (SELECT {names} FROM {table}) TO '{parquet}' (FORMAT parquet)")
            incoming = f"read_parquet('{parquet}')"
            if key is None:
                new = f"SELECT {names} FROM {incoming} EXCEPT SELECT {names} FROM {table}"
            else:
                match = " AND ".join(f"t.{column} = i.{column}" for column in key)
                new = f"SELECT i.* FROM {incoming} i WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE {match})"
            copied[table] = target.write(partial(_insert, table=table, new=new), pages=table == "pages")
    return copied


def _insert(cur: duckdb.DuckDBPyConnection, table: str, new: str) -> int:
    (count,) = cur.execute(f"INSERT INTO {table} BY NAME ({new})").fetchone()  # type: ignore[misc]
    return int(count)
