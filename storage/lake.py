"""The store as a DuckLake: a catalog (PostgreSQL for many machines, SQLite for one) plus Parquet data
files in a folder or an S3 bucket, which many processes read and write at once.

A location is `ducklake:postgres:dbname=... host=... port=... user=...`, `ducklake:sqlite:PATH` or
`ducklake:PATH.ducklake` (a DuckDB file as catalog). Unlike a .duckdb file, nothing here takes turns:
each process attaches the lake once, as `lake`, and keeps it attached until it exits; every store
session of every thread shares that one attachment through its own cursor.

The extensions come from pinned PyPI packages (duckdb-extension-ducklake and the others), loaded from
their files as fts is: nothing is downloaded at run time. S3 credentials and endpoint come from the
standard AWS_* variables into an in-memory secret, never into settings, rows or logs.

DuckLake keeps no PRIMARY KEY or UNIQUE constraint: the migrations run with those clauses removed, and
storage/store.py makes writes that must stay unique conflict with each other so that one of them is
retried (see EvidenceStore.write).
"""

from __future__ import annotations

import importlib
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import duckdb

from citeflow.config import StoreSettings
from citeflow.errors import InputError, StoreError
from storage.migrations import LATEST_VERSION, current_version, migrate

PREFIX = "ducklake:"
CATALOG = "lake"  # the name the lake is attached under in every process
INDEX_CATALOG = "memory"  # the process's own in-memory database: the full-text index lives there
BASE_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}
# The package and file name of each extension a lake may need.
EXTENSIONS = {
    "ducklake": "duckdb_extension_ducklake",
    "postgres_scanner": "duckdb_extension_postgres_scanner",
    "sqlite_scanner": "duckdb_extension_sqlite_scanner",
    "httpfs": "duckdb_extension_httpfs",
}
# Two processes migrating a new lake at once conflict; the loser retries and finds it migrated.
OPEN_ATTEMPTS = 5
# How long a reader or writer of a SQLite catalog waits for another's lock before failing.
SQLITE_BUSY_TIMEOUT_MS = 10_000
UNCHANGED = "the store is unchanged"
CONSTRAINTS = re.compile(r",\s*PRIMARY KEY\s*\([^)]*\)|\s+PRIMARY KEY\b|\s+UNIQUE\b", re.IGNORECASE)


def is_lake(value: str | Path) -> bool:
    return str(value).startswith(PREFIX)


def lake_location(value: str | Path) -> str:
    """The canonical form of a lake location: a relative catalog file made absolute, so every process
    (started in any folder) names the same lake the same way."""
    text = str(value)
    rest = text[len(PREFIX) :]
    if rest.startswith("postgres:"):
        if "=" not in rest:
            raise InputError(
                f"store {text}",
                "names a PostgreSQL catalog without a connection string (dbname=... host=... port=...)",
                "nothing was opened",
            )
        return text
    if rest.startswith("sqlite:"):
        file = rest[len("sqlite:") :]
        return f"{PREFIX}sqlite:{Path(file).expanduser().resolve()}" if file else _missing(text)
    if rest.endswith(".ducklake"):
        return f"{PREFIX}{Path(rest).expanduser().resolve()}"
    raise InputError(
        f"store {text}",
        "is not a DuckLake location citeflow knows: give ducklake:postgres:dbname=... host=... port=... "
        "user=..., ducklake:sqlite:PATH or ducklake:PATH.ducklake",
        "nothing was opened",
    )


def lake_exists(location: str) -> bool:
    """Whether a canonical lake location names a lake that is there: its catalog file, for a SQLite or
    DuckDB catalog. A PostgreSQL catalog cannot be seen without connecting; opening it says if it is not."""
    rest = location[len(PREFIX) :]
    if rest.startswith("postgres:"):
        return True
    return Path(rest.removeprefix("sqlite:")).exists()


def _missing(text: str) -> str:
    raise InputError(f"store {text}", "names no SQLite catalog file", "nothing was opened")


def extension_path(name: str) -> Path:
    """An extension shipped in its duckdb-extension-* wheel (pip install citeflow[scale])."""
    package = EXTENSIONS[name]
    try:
        module = importlib.import_module(package)
    except ImportError as error:
        raise StoreError(
            f"DuckDB extension {name}",
            f"is not installed (the package {package.replace('_', '-')} is missing); "
            "install citeflow[scale] to use a DuckLake store",
            "nothing was opened",
        ) from error
    return (
        Path(module.__file__ or "").parent
        / "extensions"
        / f"v{duckdb.__version__}"
        / f"{name}.duckdb_extension"
    )


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _s3_secret(con: duckdb.DuckDBPyConnection) -> None:
    """An in-memory S3 secret from the standard AWS variables (what boto3 and the aws CLI read too)."""
    options = {"TYPE": "s3"}
    if key := os.environ.get("AWS_ACCESS_KEY_ID"):
        options["KEY_ID"] = key
        options["SECRET"] = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    if token := os.environ.get("AWS_SESSION_TOKEN"):
        options["SESSION_TOKEN"] = token
    options["REGION"] = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    if endpoint := os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"):
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        options["ENDPOINT"] = parts.netloc
        options["USE_SSL"] = "true" if parts.scheme == "https" else "false"
        options["URL_STYLE"] = "path"  # what S3-compatible servers (MinIO, moto, Ceph) serve
    body = ", ".join(
        f"{key} {value if key == 'USE_SSL' else _quote(value)}" for key, value in options.items()
    )
    con.execute(f"CREATE OR REPLACE SECRET citeflow_s3 ({body})")


def strip_constraints(sql: str) -> str:
    """A migration's DDL without PRIMARY KEY and UNIQUE, which DuckLake refuses."""
    return CONSTRAINTS.sub("", sql)


class _LakeDDL:
    """A connection whose execute drops the constraints DuckLake refuses, for running the migrations."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con

    def execute(self, sql: str, parameters: object = None) -> duckdb.DuckDBPyConnection:
        return self._con.execute(strip_constraints(sql), parameters)


def attach(
    location: str,
    data_path: str | None,
    read_only: bool,
    memory_limit: str | None,
    snapshot: int | None = None,
) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB connection with the lake attached as `lake` and in use."""
    config = dict(BASE_CONFIG)
    if memory_limit:
        config["memory_limit"] = memory_limit
    con = duckdb.connect(":memory:", config=config)
    catalog = location[len(PREFIX) :]
    needed = ["ducklake"]
    if catalog.startswith("postgres:"):
        needed.append("postgres_scanner")
    elif catalog.startswith("sqlite:"):
        needed.append("sqlite_scanner")
    if data_path and data_path.startswith("s3://"):
        needed.append("httpfs")
    try:
        for name in needed:
            con.execute(f"LOAD {_quote(str(extension_path(name)))}")
        if "httpfs" in needed:
            _s3_secret(con)
        options = []
        if data_path:
            options.append(f"DATA_PATH {_quote(data_path)}")
        if read_only:
            options.append("READ_ONLY")
        if snapshot is not None:
            options.append(f"SNAPSHOT_VERSION {int(snapshot)}")
        if catalog.startswith("sqlite:"):
            # The threads of one process reach a SQLite catalog through connections of their own; with
            # SQLite's default journal and no busy timeout, one thread's commit fails another's read
            # at once with "database is locked" (duckdb/ducklake#128).
            options.append(f"META_JOURNAL_MODE 'WAL', META_BUSY_TIMEOUT {SQLITE_BUSY_TIMEOUT_MS}")
            Path(catalog[len("sqlite:") :]).parent.mkdir(parents=True, exist_ok=True)
        elif not catalog.startswith("postgres:"):
            Path(catalog).parent.mkdir(parents=True, exist_ok=True)
        clause = f" ({', '.join(options)})" if options else ""
        con.execute(f"ATTACH {_quote(location)} AS {CATALOG}{clause}")
    except duckdb.Error as error:
        con.close()
        raise StoreError(
            _public(location),
            f"could not be attached: {first_line(error)}",
            "the store is unchanged",
        ) from error
    return con


def _public(location: str) -> str:
    """The location with any password left out, for messages."""
    return re.sub(r"password=\S+", "password=***", location)


def first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


class SharedLake:
    """One lake as this process uses it: attached at first use, kept attached until the process ends.

    Offers what storage/files.SharedFile offers (hold, load_fts, the locks), so EvidenceStore uses either.
    """

    is_lake = True

    def __init__(self, path: Path) -> None:
        self.path = path
        self.location = str(path)
        self._state = threading.Lock()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._read_only = False
        self._fts_loaded = False
        # Held while a thread of this process writes pages (the lake itself orders processes).
        self.page_lock = threading.Lock()
        self.index_lock = threading.RLock()

    @property
    def is_open(self) -> bool:
        with self._state:
            return self._con is not None

    @contextmanager
    def hold(self, read_only: bool, settings: StoreSettings) -> Iterator[duckdb.DuckDBPyConnection]:
        yield self._connection(read_only, settings)

    def _connection(self, read_only: bool, settings: StoreSettings) -> duckdb.DuckDBPyConnection:
        with self._state:
            if self._con is not None and self._read_only and not read_only:
                self._con.close()  # a read-only attachment (citeflow sql) gives way to a writable one
                self._con = None
            if self._con is None:
                self._con = self._open(read_only, settings)
                self._read_only = read_only
                self._fts_loaded = False
            return self._con

    def _open(self, read_only: bool, settings: StoreSettings) -> duckdb.DuckDBPyConnection:
        """Attach, bring the schema up to date, and make sure the page-write guard's row exists.

        Processes that find a new lake at the same moment race to create its catalog tables and to
        migrate it; the losers' attempts fail and are made again on the lake the winner made."""
        for attempt in range(1, OPEN_ATTEMPTS + 1):
            try:
                con = attach(
                    self.location,
                    settings.data_path,
                    read_only,
                    settings.sql_memory_limit if read_only else None,
                )
            except StoreError as error:
                if attempt == OPEN_ATTEMPTS or not isinstance(error.__cause__, duckdb.Error):
                    raise
                time.sleep(0.2 * attempt)
                continue
            try:
                con.execute(f"USE {CATALOG}")
                self._bring_up_to_date(con, read_only)
                if not read_only:
                    # The one row EvidenceStore.write's page-write guard updates.
                    con.execute(
                        "INSERT INTO search_index SELECT 0, NULL, now()::TIMESTAMP "
                        "WHERE NOT EXISTS (SELECT 1 FROM search_index)"
                    )
                return con
            except duckdb.Error:
                con.close()
                if attempt == OPEN_ATTEMPTS:
                    raise
                time.sleep(0.2 * attempt)
            except BaseException:
                con.close()
                raise
        raise AssertionError("unreachable")

    def _bring_up_to_date(self, con: duckdb.DuckDBPyConnection, read_only: bool) -> None:
        try:
            version = current_version(con)
        except duckdb.Error as error:
            raise StoreError(
                _public(self.location), f"could not be read: {first_line(error)}", "the store is unchanged"
            ) from error
        if version > LATEST_VERSION:
            raise StoreError(
                _public(self.location),
                f"was written by a newer citeflow (schema version {version}; this citeflow knows up to "
                f"{LATEST_VERSION}); upgrade citeflow to use it",
                "the store is unchanged",
            )
        if version < LATEST_VERSION:
            if read_only:
                raise StoreError(
                    _public(self.location),
                    f"has schema version {version} but this citeflow needs {LATEST_VERSION}; "
                    "open it once read-write (e.g. citeflow ingest) to migrate",
                    "the store is unchanged",
                )
            try:
                migrate(_LakeDDL(con))  # type: ignore[arg-type]
            except duckdb.TransactionException:
                raise  # another process migrated at the same moment: attach again and look
            except duckdb.Error as error:
                raise StoreError(
                    _public(self.location),
                    f"could not be migrated: {first_line(error)}",
                    "the store is unchanged",
                ) from error

    def load_fts(self) -> None:
        """Load full-text search (for the per-process index, storage/search.py); on a read-only
        attachment (`citeflow sql`) also shut it off from every file but the lake's data."""
        from storage.files import fts_extension_path

        with self._state:
            if self._con is None:
                raise StoreError(_public(self.location), "is not attached", "nothing was read or written")
            if not self._fts_loaded:
                self._con.execute(f"LOAD {_quote(str(fts_extension_path()))}")
                if self._read_only:
                    lock_down(self._con)
                self._fts_loaded = True

    def close(self) -> None:
        with self._state:
            if self._con is not None:
                self._con.close()
                self._con = None


_lakes: dict[str, SharedLake] = {}
_lakes_lock = threading.Lock()


def shared_lake(path: Path) -> SharedLake:
    with _lakes_lock:
        lake = _lakes.get(str(path))
        if lake is None:
            lake = _lakes[str(path)] = SharedLake(path)
        return lake


def lock_down(con: duckdb.DuckDBPyConnection) -> None:
    """Let user SQL reach no file but the lake's data files (a folder or an S3 prefix), as the file
    store's connection reaches no file but the store."""
    row = con.execute(
        f"SELECT value FROM __ducklake_metadata_{CATALOG}.ducklake_metadata WHERE key = 'data_path'"
    ).fetchone()
    allowed = [row[0]] if row and row[0] else []
    con.execute("SET allowed_directories = ?", [allowed])
    con.execute("SET enable_external_access = false")


def snapshot_of(cur: duckdb.DuckDBPyConnection, at: str) -> int:
    """The lake snapshot `citeflow sql --at` reads: the one in which run `at` had just finished, or the
    last one committed at or before `at` read as a UTC timestamp."""
    run = cur.execute("SELECT ended_at FROM runs WHERE run_id = ?", [at]).fetchone()
    if run is not None:
        if run[0] is None:
            raise InputError(
                f"run {at}", "has not finished yet, so there is no store as it was when it did", UNCHANGED
            )
        # The first snapshot from the run's end on in which the run's row reads as ended: the commit
        # of finish_run (another process may have committed in between).
        candidates = cur.execute(
            f"SELECT snapshot_id FROM ducklake_snapshots('{CATALOG}') "
            "WHERE snapshot_time >= ?::TIMESTAMP AT TIME ZONE 'UTC' ORDER BY snapshot_id",
            [run[0]],
        ).fetchall()
        for (snapshot,) in candidates:
            ended = cur.execute(
                f"SELECT ended_at FROM runs AT (VERSION => {int(snapshot)}) WHERE run_id = ?", [at]
            ).fetchone()
            if ended is not None and ended[0] is not None:
                return int(snapshot)
        raise InputError(
            f"run {at}", "has no snapshot in which it had finished (were they expired?)", UNCHANGED
        )
    try:
        (snapshot,) = cur.execute(  # type: ignore[misc]
            f"SELECT max(snapshot_id) FROM ducklake_snapshots('{CATALOG}') "
            "WHERE snapshot_time <= ?::TIMESTAMP AT TIME ZONE 'UTC'",
            [at],
        ).fetchone()
    except duckdb.ConversionException as error:
        raise InputError(
            f"--at {at}",
            "is neither a run id of this store nor a timestamp (e.g. 2026-12-05 15:06:00)",
            UNCHANGED,
        ) from error
    if snapshot is None:
        raise InputError(f"--at {at}", "is before the lake's first snapshot", UNCHANGED)
    return int(snapshot)


def compact(con: duckdb.DuckDBPyConnection, keep_days: int) -> dict[str, int]:
    """Maintenance of a lake (flows/maintenance.py runs it on a schedule): merge the many small Parquet
    files that small commits leave, expire snapshots older than `keep_days` (`citeflow sql --at` can
    no longer read before that), and delete the files no snapshot needs any more.

    Returns the data files before and after, and the snapshots expired."""
    files_before = _data_files(con)
    snapshots_before = _snapshots(con)
    con.execute(f"CALL ducklake_flush_inlined_data('{CATALOG}')")
    con.execute(f"CALL ducklake_merge_adjacent_files('{CATALOG}')")
    con.execute(
        f"CALL ducklake_expire_snapshots('{CATALOG}', older_than => now() - INTERVAL {int(keep_days)} DAY)"
    )
    con.execute(f"CALL ducklake_cleanup_old_files('{CATALOG}', cleanup_all => true)")
    return {
        "files_before": files_before,
        "files_after": _data_files(con),
        "snapshots_expired": snapshots_before - _snapshots(con),
    }


def _data_files(con: duckdb.DuckDBPyConnection) -> int:
    (count,) = con.execute(  # type: ignore[misc]
        f"SELECT count(*) FROM __ducklake_metadata_{CATALOG}.ducklake_data_file WHERE end_snapshot IS NULL"
    ).fetchone()
    return int(count)


def _snapshots(con: duckdb.DuckDBPyConnection) -> int:
    (count,) = con.execute(f"SELECT count(*) FROM ducklake_snapshots('{CATALOG}')").fetchone()  # type: ignore[misc]
    return int(count)
