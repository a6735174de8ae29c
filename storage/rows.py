"""Contract records in and out of the tables that mirror them, by column name.

Every table's columns carry the field names of its model in citeflow/contracts.py (storage/migrations.py
keeps them equal), so a row is read by selecting exactly the model's fields and naming each value by its
column, never by its position. Times are stored as naive UTC and come back as aware UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import duckdb
from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def utc_now() -> datetime:
    """Naive UTC, the form every TIMESTAMP column holds."""
    return datetime.now(UTC).replace(tzinfo=None)


def as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def to_column(value: datetime) -> datetime:
    return as_utc(value).replace(tzinfo=None)


def columns(model: type[BaseModel], alias: str = "", omit: tuple[str, ...] = ()) -> str:
    """The model's fields as a SELECT list, optionally qualified by a table alias; `omit` names fields
    the table does not hold (the caller selects them from elsewhere)."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + name for name in model.model_fields if name not in omit)


def named_rows(cur: duckdb.DuckDBPyConnection, sql: str, params: Any = None) -> list[dict[str, Any]]:
    """Each row as {column: value}, timestamps as aware UTC."""
    cur.execute(sql, params)
    names = [description[0] for description in cur.description or []]
    return [
        {
            name: as_utc(value) if isinstance(value, datetime) else value
            for name, value in zip(names, row, strict=True)
        }
        for row in cur.fetchall()
    ]


def select(cur: duckdb.DuckDBPyConnection, model: type[M], sql: str, params: Any = None) -> list[M]:
    """Rows of `sql` (which selects `columns(model)`) as model instances."""
    return [model.model_validate(row) for row in named_rows(cur, sql, params)]


def insert(
    cur: duckdb.DuckDBPyConnection,
    table: str,
    records: Sequence[BaseModel],
    omit: tuple[str, ...] = (),
    **extra: Any,
) -> None:
    """Insert records into the table that mirrors their model, but for the fields in `omit` (which the
    table does not hold), plus `extra` columns equal for every row."""
    if not records:
        return
    rows = [
        {
            name: to_column(v) if isinstance(v, datetime) else v
            for name, v in record.model_dump(exclude=set(omit)).items()
        }
        | extra
        for record in records
    ]
    names = list(rows[0])
    cur.executemany(
        f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
        [[row[name] for name in names] for row in rows],
    )
