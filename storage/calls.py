"""The `model_calls` table: one row per call to a model endpoint. Token budgets and run metrics are
summed from these rows, never from counters in memory."""

from __future__ import annotations

import duckdb
from pydantic import BaseModel

from citeflow.contracts import ModelCall
from storage.rows import insert, named_rows, select, utc_now


class RoleUsage(BaseModel):
    """One role's model calls in a run, summed from the model_calls rows."""

    role: str
    calls: int
    prompt_tokens: int
    completion_tokens: int


def add(cur: duckdb.DuckDBPyConnection, call: ModelCall) -> None:
    insert(cur, "model_calls", [call], called_at=utc_now())


def run_tokens(cur: duckdb.DuckDBPyConnection, run_id: str) -> tuple[int, int]:
    """(prompt, completion) tokens the run's model calls used so far."""
    [row] = named_rows(
        cur,
        "SELECT coalesce(sum(prompt_tokens), 0) AS prompt, coalesce(sum(completion_tokens), 0) AS completion "
        "FROM model_calls WHERE run_id = ?",
        [run_id],
    )
    return int(row["prompt"]), int(row["completion"])


def role_usage(cur: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, RoleUsage]:
    """Calls and tokens per role."""
    usage = select(
        cur,
        RoleUsage,
        "SELECT role, count(*) AS calls, sum(prompt_tokens) AS prompt_tokens, "
        "sum(completion_tokens) AS completion_tokens FROM model_calls "
        "WHERE run_id = ? GROUP BY role ORDER BY role",
        [run_id],
    )
    return {role.role: role for role in usage}
