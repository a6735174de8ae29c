"""Numbered schema migrations for the evidence store.

MIGRATIONS is append-only: a migration, once released, is never edited, because stores in the field
already ran it. Each one runs once, inside a transaction, and is recorded in `schema_migrations`, so
re-opening a store runs only what is new. Columns mirror the field names of citeflow/contracts.py.
Timestamps are naive UTC (TIMESTAMP): DuckDB returns TIMESTAMPTZ values in the session time zone,
which would make the same row read differently on two machines.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import duckdb

Migration = Callable[[duckdb.DuckDBPyConnection], None]


def m001_initial(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        """
        CREATE TABLE runs (
            run_id VARCHAR PRIMARY KEY,
            question VARCHAR NOT NULL,
            status VARCHAR NOT NULL,
            engine VARCHAR NOT NULL,
            search VARCHAR NOT NULL,
            settings JSON,
            started_at TIMESTAMP NOT NULL,
            ended_at TIMESTAMP,
            wall_seconds DOUBLE,
            report_markdown VARCHAR,
            report_path VARCHAR,
            metrics JSON
        );
        CREATE TABLE subquestions (
            run_id VARCHAR NOT NULL,
            id VARCHAR NOT NULL,
            position INTEGER NOT NULL,
            text VARCHAR NOT NULL,
            query VARCHAR NOT NULL,
            PRIMARY KEY (run_id, id)
        );
        CREATE TABLE pages (
            id VARCHAR PRIMARY KEY,
            url VARCHAR NOT NULL,
            canonical_url VARCHAR NOT NULL,
            title VARCHAR NOT NULL,
            text VARCHAR NOT NULL,
            content_hash VARCHAR NOT NULL,
            origin VARCHAR NOT NULL,
            published VARCHAR,
            stored_at TIMESTAMP NOT NULL
        );
        CREATE TABLE search_results (
            run_id VARCHAR NOT NULL,
            subquestion_id VARCHAR NOT NULL,
            provider VARCHAR NOT NULL,
            rank INTEGER NOT NULL,
            url VARCHAR NOT NULL,
            title VARCHAR NOT NULL,
            snippet VARCHAR NOT NULL,
            page_id VARCHAR
        );
        CREATE TABLE run_sources (
            run_id VARCHAR NOT NULL,
            subquestion_id VARCHAR NOT NULL,
            page_id VARCHAR NOT NULL,
            provider VARCHAR NOT NULL,
            rank INTEGER NOT NULL,
            source_id VARCHAR
        );
        CREATE TABLE claims (
            run_id VARCHAR NOT NULL,
            id VARCHAR NOT NULL,
            subquestion_id VARCHAR NOT NULL,
            page_id VARCHAR NOT NULL,
            page_hash VARCHAR NOT NULL,
            text VARCHAR NOT NULL,
            quote VARCHAR NOT NULL,
            quote_start INTEGER,
            quote_end INTEGER,
            status VARCHAR NOT NULL,
            reason VARCHAR NOT NULL,
            source_id VARCHAR
        );
        CREATE TABLE report_sentences (
            run_id VARCHAR NOT NULL,
            position INTEGER NOT NULL,
            section VARCHAR NOT NULL,
            text VARCHAR NOT NULL,
            cites VARCHAR[] NOT NULL,
            status VARCHAR NOT NULL,
            reason VARCHAR NOT NULL
        );
        CREATE TABLE model_calls (
            run_id VARCHAR NOT NULL,
            role VARCHAR NOT NULL,
            model VARCHAR NOT NULL,
            endpoint VARCHAR NOT NULL,
            prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL,
            tokens_estimated BOOLEAN NOT NULL,
            latency_seconds DOUBLE NOT NULL,
            attempt INTEGER NOT NULL,
            outcome VARCHAR NOT NULL,
            prompt_hash VARCHAR NOT NULL,
            detail VARCHAR NOT NULL,
            called_at TIMESTAMP NOT NULL
        );
        CREATE TABLE traces (
            run_id VARCHAR NOT NULL,
            stage VARCHAR NOT NULL,
            subquestion_id VARCHAR,
            actor VARCHAR NOT NULL,
            started_at TIMESTAMP NOT NULL,
            ended_at TIMESTAMP NOT NULL,
            outcome VARCHAR NOT NULL,
            detail VARCHAR NOT NULL
        );
        CREATE TABLE errors (
            run_id VARCHAR NOT NULL,
            stage VARCHAR NOT NULL,
            subquestion_id VARCHAR,
            detail VARCHAR NOT NULL,
            recorded_at TIMESTAMP NOT NULL
        );
        -- The full-text index does not follow inserts; this row says which state of `pages` it was
        -- built from, so a search can tell it is stale and rebuild it (storage/search.py).
        CREATE TABLE search_index (
            pages BIGINT NOT NULL,
            max_stored_at TIMESTAMP,
            built_at TIMESTAMP NOT NULL
        );
        """
    )


def m002_run_owner(con: duckdb.DuckDBPyConnection) -> None:
    """The process that runs a run, so a run left `running` by a dead process can be marked `crashed`,
    and the hash of the settings it ran with."""
    con.execute(
        """
        ALTER TABLE runs ADD COLUMN settings_hash VARCHAR;
        ALTER TABLE runs ADD COLUMN pid INTEGER;
        ALTER TABLE runs ADD COLUMN host VARCHAR;
        ALTER TABLE runs ADD COLUMN process_started DOUBLE;
        """
    )


def m003_run_topic(con: duckdb.DuckDBPyConnection) -> None:
    """The recurring topic a run researched, so a run can be compared with the topic's previous one."""
    con.execute("ALTER TABLE runs ADD COLUMN topic VARCHAR")


def m004_model_call_text(con: duckdb.DuckDBPyConnection) -> None:
    """What each model call was shown and answered (ModelCall.prompt, ModelCall.reply), so a run's
    rejected claims and fallbacks can be explained from the store. Rows stored before hold ''."""
    con.execute(
        """
        ALTER TABLE model_calls ADD COLUMN prompt VARCHAR DEFAULT '';
        ALTER TABLE model_calls ADD COLUMN reply VARCHAR DEFAULT '';
        """
    )


def m005_report_kind(con: duckdb.DuckDBPyConnection) -> None:
    """The kind of report a run wrote (Report.kind: 'answer' or 'digest') and, for each report sentence,
    how many distinct pages it cites (ReportSentence.pages: a digest finding's corroboration). Runs and
    sentences stored before read 'answer' and 0."""
    con.execute(
        """
        ALTER TABLE runs ADD COLUMN report_kind VARCHAR DEFAULT 'answer';
        ALTER TABLE report_sentences ADD COLUMN pages INTEGER DEFAULT 0;
        """
    )


def m006_source_numbers(con: duckdb.DuckDBPyConnection) -> None:
    """Source numbers move out of `claims` and `run_sources` into `source_numbers`, which only ever gets
    inserts; the view `sources` holds each run's latest numbering.

    Numbering used to UPDATE claims and run_sources. On a lake an UPDATE deletes and re-inserts rows, and
    any insert into a table conflicts with a delete from it committed meanwhile (DuckLake 1.5), so
    every run's numbering made other runs' claims fail to commit. Inserts never conflict with inserts.
    """
    con.execute(
        """
        CREATE TABLE source_numbers (
            run_id VARCHAR NOT NULL,
            numbering INTEGER NOT NULL,
            page_id VARCHAR NOT NULL,
            source_id VARCHAR NOT NULL
        );
        INSERT INTO source_numbers
            SELECT DISTINCT run_id, 1, page_id, source_id FROM run_sources WHERE source_id IS NOT NULL;
        ALTER TABLE claims DROP COLUMN source_id;
        ALTER TABLE run_sources DROP COLUMN source_id;
        CREATE VIEW sources AS
            SELECT n.run_id, n.page_id, n.source_id FROM source_numbers n
            WHERE n.numbering = (SELECT max(m.numbering) FROM source_numbers m WHERE m.run_id = n.run_id);
        """
    )


MIGRATIONS: list[Migration] = [
    m001_initial,
    m002_run_owner,
    m003_run_topic,
    m004_model_call_text,
    m005_report_kind,
    m006_source_numbers,
]


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    """The number of migrations this store has run; 0 for a new file."""
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables "
        "WHERE table_schema = 'main' AND table_name = 'schema_migrations'"
    ).fetchone()
    if not exists or exists[0] == 0:
        return 0
    row = con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
    return int(row[0]) if row else 0


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Run every pending migration in one transaction and return the schema version.

    Either all pending migrations apply or none do: a failure rolls the store back to the
    version it had.
    """
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
        )
        version = current_version(con)
        for number, migration in enumerate(MIGRATIONS, start=1):
            if number <= version:
                continue
            migration(con)
            con.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                [number, migration.__name__, datetime.now(UTC).replace(tzinfo=None)],
            )
            version = number
        con.execute("COMMIT")
    except duckdb.Error:
        con.execute("ROLLBACK")
        raise
    return version


LATEST_VERSION = len(MIGRATIONS)
