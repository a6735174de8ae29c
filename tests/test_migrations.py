"""The schema a new store gets, and that migrations run once."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from storage import migrations
from storage.store import EvidenceStore

EXPECTED_SCHEMA = {
    "schema_migrations": ["version", "name", "applied_at"],
    "runs": [
        "run_id",
        "question",
        "status",
        "engine",
        "search",
        "settings",
        "started_at",
        "ended_at",
        "wall_seconds",
        "report_markdown",
        "report_path",
        "metrics",
        "settings_hash",
        "pid",
        "host",
        "process_started",
        "topic",
        "report_kind",
    ],
    "subquestions": ["run_id", "id", "position", "text", "query"],
    "pages": [
        "id",
        "url",
        "canonical_url",
        "title",
        "text",
        "content_hash",
        "origin",
        "published",
        "stored_at",
    ],
    "search_results": ["run_id", "subquestion_id", "provider", "rank", "url", "title", "snippet", "page_id"],
    "run_sources": ["run_id", "subquestion_id", "page_id", "provider", "rank"],
    "source_numbers": ["run_id", "numbering", "page_id", "source_id"],
    "sources": ["run_id", "page_id", "source_id"],
    "claims": [
        "run_id",
        "id",
        "subquestion_id",
        "page_id",
        "page_hash",
        "text",
        "quote",
        "quote_start",
        "quote_end",
        "status",
        "reason",
    ],
    "report_sentences": ["run_id", "position", "section", "text", "cites", "status", "reason", "pages"],
    "model_calls": [
        "run_id",
        "role",
        "model",
        "endpoint",
        "prompt_tokens",
        "completion_tokens",
        "tokens_estimated",
        "latency_seconds",
        "attempt",
        "outcome",
        "prompt_hash",
        "detail",
        "called_at",
        "prompt",
        "reply",
    ],
    "traces": ["run_id", "stage", "subquestion_id", "actor", "started_at", "ended_at", "outcome", "detail"],
    "errors": ["run_id", "stage", "subquestion_id", "detail", "recorded_at"],
    "search_index": ["pages", "max_stored_at", "built_at"],
}


def schema(path: Path) -> dict[str, list[str]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position"
        ).fetchall()
    finally:
        con.close()
    tables: dict[str, list[str]] = {}
    for table, column in rows:
        tables.setdefault(table, []).append(column)
    return tables


def test_new_store_has_exactly_the_expected_schema(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "store.duckdb"
    EvidenceStore.open(path).close()
    assert schema(path) == EXPECTED_SCHEMA


def test_reopening_does_not_rerun_migrations(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    with EvidenceStore.open(path) as store, store.cursor() as cur:
        first = cur.execute("SELECT version, name, applied_at FROM schema_migrations").fetchall()
    with EvidenceStore.open(path) as store, store.cursor() as cur:
        again = cur.execute("SELECT version, name, applied_at FROM schema_migrations").fetchall()
        assert migrations.current_version(cur) == migrations.LATEST_VERSION
    assert first == again
    assert [(version, name) for version, name, _ in first] == [
        (1, "m001_initial"),
        (2, "m002_run_owner"),
        (3, "m003_run_topic"),
        (4, "m004_model_call_text"),
        (5, "m005_report_kind"),
        (6, "m006_source_numbers"),
    ]


def store_at_version(path: Path, version: int) -> duckdb.DuckDBPyConnection:
    """A connection to a new store at `path` that ran the first `version` migrations, as a citeflow of
    that schema version left it."""
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE schema_migrations ("
        "version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
    )
    for number, migration in enumerate(migrations.MIGRATIONS[:version], start=1):
        migration(con)
        con.execute(
            "INSERT INTO schema_migrations VALUES (?, ?, now()::TIMESTAMP)", [number, migration.__name__]
        )
    return con


def test_a_version_1_store_gains_the_model_call_text_columns(tmp_path: Path) -> None:
    con = store_at_version(tmp_path / "store.duckdb", 1)
    try:
        con.execute(
            "INSERT INTO model_calls VALUES ('r', 'planner', 'm', 'http://127.0.0.1:9/v1', 1, 2, false, "
            "0.1, 1, 'ok', 'h', '', now()::TIMESTAMP)"
        )
        assert migrations.migrate(con) == migrations.LATEST_VERSION == 6
        assert con.execute("SELECT role, prompt, reply FROM model_calls").fetchall() == [("planner", "", "")]
    finally:
        con.close()


def test_a_version_5_store_keeps_its_source_numbers_in_source_numbers(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    con = store_at_version(path, 5)
    try:
        for page, rank, source in (("pa", 1, "S2"), ("pb", 2, None), ("pc", 3, "S1"), ("pc", 1, "S1")):
            con.execute("INSERT INTO run_sources VALUES ('r', 'q1', ?, 'local', ?, ?)", [page, rank, source])
        con.execute(
            "INSERT INTO claims VALUES ('r', 'C1', 'q1', 'pa', 'h', 't', 'q', 0, 1, 'verified', '', 'S2')"
        )
    finally:
        con.close()
    with EvidenceStore.open(path) as store:
        assert {(rs.page_id, rs.source_id) for rs in store.run_sources("r")} == {
            ("pa", "S2"),
            ("pb", None),
            ("pc", "S1"),
        }
        assert [(claim.id, claim.source_id) for claim in store.claims("r")] == [("C1", "S2")]
        with store.cursor() as cur:  # one row a cited page, though pc was read twice
            assert cur.execute("SELECT * FROM source_numbers ORDER BY page_id").fetchall() == [
                ("r", 1, "pa", "S2"),
                ("r", 1, "pc", "S1"),
            ]
    tables = schema(path)
    assert "source_id" not in tables["claims"] and "source_id" not in tables["run_sources"]


def test_a_failing_migration_leaves_the_store_at_its_old_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store.duckdb"
    EvidenceStore.open(path).close()

    def broken(con: duckdb.DuckDBPyConnection) -> None:
        con.execute("CREATE TABLE half_done (a INTEGER)")
        con.execute("SELECT * FROM no_such_table")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, broken])
    con = duckdb.connect(str(path))
    try:
        with pytest.raises(duckdb.CatalogException):
            migrations.migrate(con)
        assert migrations.current_version(con) == migrations.LATEST_VERSION
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        assert "half_done" not in tables
    finally:
        con.close()
