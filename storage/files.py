"""The store's file: which paths may be a store, what a file holds before citeflow writes to it, and the
one DuckDB connection per file that a process opens only while it reads or writes.

DuckDB lets one process hold a file read-write, and then no other process may open it, not even to read.
So no citeflow process keeps the file: a store method (or a `session()` around several) opens it, and the
last user in the process to leave runs CHECKPOINT and closes it, releasing the lock and leaving every
committed row in the .duckdb file itself (not only in its .wal). A process that finds the file held by
another waits with backoff, up to StoreSettings.wait_seconds, says so once, and only then gives up.

Prefect runs a flow's tasks in threads of one process: they share the one connection, each through its
own cursor, and the connection stays open while any of them uses it (a count of users).
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import duckdb_extension_fts

from citeflow.config import StoreSettings
from citeflow.errors import InputError, StoreError
from storage.lake import is_lake, lake_exists, lake_location
from storage.migrations import LATEST_VERSION, MIGRATIONS, current_version, migrate

# Waits for the file are reported here; the command line prints them as one line.
log = logging.getLogger("citeflow.store")

# A DuckDB file carries this magic at byte 8. Checking it before connecting means a file that is
# not a DuckDB database is never handed to DuckDB, which could otherwise try to write to it.
DUCKDB_MAGIC = b"DUCK"
DUCKDB_MAGIC_OFFSET = 8

# DuckDB reads "md:x", "s3://b/x", "http://...", ":memory:" and other prefixes as databases that are not
# local files (some download an extension to reach them). A drive letter (C:\) is still a path.
NOT_A_FILE = re.compile(r"^(?![A-Za-z]:[\\/])([A-Za-z][A-Za-z0-9+.\-]*:|:)")

LOCKED = "Could not set lock on file"
DAMAGED = ("Corrupt database file", "Could not read enough bytes", "not a valid DuckDB database file")
HOLDER = re.compile(r"\(PID (\d+)\)")

# Backoff between attempts to open a held file: short at first (sessions last milliseconds), never so
# long that the file's free moments between another process's sessions go unnoticed. A failed attempt
# costs about 9 ms of CPU (measured), so polling at the cap costs a waiting process a tenth of a core.
FIRST_DELAY_SECONDS = 0.01
MAX_DELAY_SECONDS = 0.1
# A wait shorter than this is the normal cost of sharing and is not reported.
REPORT_AFTER_SECONDS = 1.0

Config = dict[str, str | bool | int | float | list[str]]  # what duckdb.connect takes as config
BASE_CONFIG: Config = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
# A store file is attached under this name to an in-memory connection, and in use: ATTACH is the only way
# to set its row group size, which DuckDB does not keep in the file.
FILE_CATALOG = "store"
# Rows per row group (DuckDB's default is 122,880). A checkpoint rewrites the last, growing row group
# whole, with its text compressed at once: at about 2,000 characters a page, 200,000 pages written a few
# thousand at a time took 557 MB and 53 s at the default, 276 MB and 23 s at this size (and a smaller file).
ROW_GROUP_SIZE = 8192


def store_path(value: str | Path) -> Path:
    """The absolute path of a store file, refusing anything DuckDB would read as a URL or an extension."""
    text = str(value)
    if is_lake(text):  # a DuckLake catalog (storage/lake.py), kept as its canonical text
        return Path(lake_location(text))
    if NOT_A_FILE.match(text):
        raise InputError(
            f"store {text}",
            "looks like a DuckDB URL or extension prefix, not a file path; give a local file path "
            "(for a file whose name has a colon, give its absolute path)",
            "nothing was opened",
        )
    return Path(text).expanduser().resolve()


def store_exists(path: Path) -> bool:
    """Whether the store at a store_path() is there, a file or a lake."""
    return lake_exists(str(path)) if is_lake(path) else path.exists()


def fts_extension_path() -> Path:
    """The fts extension shipped in the duckdb-extension-fts wheel, so loading it needs no network."""
    return (
        Path(duckdb_extension_fts.__file__).parent
        / "extensions"
        / f"v{duckdb.__version__}"
        / "fts.duckdb_extension"
    )


def first_line(error: BaseException) -> str:
    """A DuckDB message's first line: the lines after it are advice that would break a one-line error."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def duckdb_detail(error: duckdb.Error) -> str:
    """DuckDB's first line without its "IO Error: " style prefix."""
    first = first_line(error)
    return first.split(": ", 1)[1] if ": " in first else first


def _check_is_duckdb_file(path: Path) -> None:
    if not path.is_file():
        raise StoreError(str(path), "is not a file", "nothing was changed")
    with path.open("rb") as handle:
        header = handle.read(DUCKDB_MAGIC_OFFSET + len(DUCKDB_MAGIC))
    if header[DUCKDB_MAGIC_OFFSET:] != DUCKDB_MAGIC:
        raise StoreError(
            str(path), "is not a DuckDB database (choose another --db path)", "the file was left untouched"
        )


def _check_is_a_store(path: Path, con: duckdb.DuckDBPyConnection) -> None:
    """Refuse a DuckDB file that holds something other than a citeflow store, or a newer one.

    A database with no tables or views at all is a store whose creation was interrupted before its
    first migration committed: there is nothing in it to harm, so it is adopted.
    """
    names = {
        row[0]
        for row in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE NOT internal "
            "UNION ALL SELECT view_name FROM duckdb_views() WHERE NOT internal"
        ).fetchall()
    }
    if not names:
        return
    try:
        first = (
            con.execute("SELECT name FROM schema_migrations WHERE version = 1").fetchone()
            if "schema_migrations" in names
            else None
        )
    except duckdb.Error:  # a schema_migrations table of another shape: another tool's
        first = None
    if first is None or first[0] != MIGRATIONS[0].__name__:
        raise StoreError(
            str(path),
            "is a DuckDB database but not a citeflow store (it has no citeflow schema_migrations); "
            "choose another --db path",
            "the file was left untouched",
        )
    _check_version(path, current_version(con))


def _inspect(path: Path, con: duckdb.DuckDBPyConnection) -> None:
    try:
        _check_is_a_store(path, con)
    except duckdb.Error as error:
        raise StoreError(
            str(path),
            f"is damaged and cannot be read ({duckdb_detail(error)}); restore it from a copy",
            "the file was left untouched",
        ) from error


def _check_version(path: Path, version: int) -> None:
    if version > LATEST_VERSION:
        raise StoreError(
            str(path),
            f"was written by a newer citeflow (schema version {version}; this citeflow knows up to "
            f"{LATEST_VERSION}); upgrade citeflow to use it",
            "the file was left untouched",
        )


def _connect(
    path: Path, read_only: bool, settings: StoreSettings, config: Config
) -> duckdb.DuckDBPyConnection:
    """Connect, waiting with backoff while another process holds the file (reported once, after a
    second); a file DuckDB cannot read is refused at once with what DuckDB found wrong."""
    started = time.monotonic()
    deadline = started + settings.wait_seconds
    delay = FIRST_DELAY_SECONDS
    reported = False
    while True:
        try:
            return _attached(path, read_only, config)
        except duckdb.Error as error:
            message = str(error)
            if LOCKED not in message:
                if any(sign in message for sign in DAMAGED):
                    problem = (
                        f"is damaged and cannot be read ({duckdb_detail(error)}); restore it from a copy"
                    )
                else:
                    problem = f"could not be opened: {duckdb_detail(error)}"
                raise StoreError(str(path), problem, "the file was left untouched") from error
            now = time.monotonic()
            holder = HOLDER.search(message)
            who = f"another process (PID {holder.group(1)})" if holder else "another process"
            if now >= deadline:
                raise StoreError(
                    str(path),
                    f"is held by {who} and was not released within {settings.wait_seconds:g} s; try again "
                    "when it finishes, or allow a longer wait with CITEFLOW_STORE__WAIT_SECONDS",
                    "the store is unchanged",
                ) from error
            if not reported and now - started >= REPORT_AFTER_SECONDS:
                log.warning("%s is held by %s; waiting up to %g s for it", path, who, settings.wait_seconds)
                reported = True
            time.sleep(min(delay * random.uniform(0.5, 1.5), deadline - now))
            delay = min(delay * 2, MAX_DELAY_SECONDS)


def _attached(path: Path, read_only: bool, config: Config) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with the file attached as FILE_CATALOG and in use; what DuckDB spills goes
    beside the file, as it would with the file opened directly (not to .tmp in the working directory)."""
    con = duckdb.connect(":memory:", config=config | {"temp_directory": f"{path}.tmp"})
    options = f"ROW_GROUP_SIZE {ROW_GROUP_SIZE}" + (", READ_ONLY" if read_only else "")
    quoted = "'" + str(path).replace("'", "''") + "'"
    try:
        con.execute(f"ATTACH {quoted} AS {FILE_CATALOG} ({options})")
        con.execute(f"USE {FILE_CATALOG}")
    except BaseException:
        con.close()
        raise
    return con


class SharedFile:
    """One store file as this process uses it: a connection open while anyone in the process uses it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._state = threading.Condition()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._read_only = False
        self._users = 0
        self._fts_loaded = False
        self._checked = False  # the file was seen to be a citeflow store this citeflow can use
        # Page writes check-then-insert; serialising them in this process keeps two threads from
        # inserting the same page id at once.
        self.page_lock = threading.Lock()
        # Held by storage/search.py while it checks, rebuilds and reads the full-text index.
        self.index_lock = threading.RLock()
        # DuckDB memory_limit of read-write connections opened while set (EvidenceStore.memory_limit).
        self.memory_limit: str | None = None

    @property
    def is_open(self) -> bool:
        with self._state:
            return self._con is not None

    @contextmanager
    def hold(self, read_only: bool, settings: StoreSettings) -> Iterator[duckdb.DuckDBPyConnection]:
        """The connection, opened if nobody in this process has it open, for the duration of the block.

        A read-only user joins a read-write connection already open. A read-write user waits for a
        read-only connection of this process to close (bounded like a wait for another process).
        """
        con = self._acquire(read_only, settings)
        try:
            yield con
        except BaseException:
            self._release(raising=False)
            raise
        self._release(raising=True)

    def load_fts(self) -> None:
        """Load full-text search into the open connection, then close it to every other file.

        Loaded on first need, not at every open: verifying the extension's signature costs more than
        opening the file, and most sessions never search. Once loaded, SQL on this connection (user SQL
        included) may touch no file but the store.
        """
        with self._state:
            if self._con is None:
                raise StoreError(str(self.path), "is not open", "nothing was read or written")
            if self._fts_loaded:
                return
            try:
                self._con.execute(f"LOAD '{fts_extension_path()}'")
                self._con.execute("SET enable_external_access = false")
            except duckdb.Error as error:
                raise StoreError(
                    str(fts_extension_path()),
                    f"the full-text search extension could not be loaded: {duckdb_detail(error)}",
                    "the store is unchanged",
                ) from error
            self._fts_loaded = True

    def _acquire(self, read_only: bool, settings: StoreSettings) -> duckdb.DuckDBPyConnection:
        with self._state:
            deadline = time.monotonic() + settings.wait_seconds
            while self._con is not None and self._read_only and not read_only:
                if not self._state.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise StoreError(
                        str(self.path),
                        "is open read-only in this process and was not released in time for a write",
                        "the store is unchanged",
                    )
            if self._con is None:
                self._con = self._open(read_only, settings)
                self._read_only = read_only
                self._fts_loaded = False
            self._users += 1
            return self._con

    def _release(self, raising: bool) -> None:
        with self._state:
            self._users -= 1
            if self._users:
                return
            con, self._con = self._con, None
            self._state.notify_all()
            assert con is not None
            try:
                if not self._read_only:
                    # Written now, not left to DuckDB's close: a failure here can still be reported,
                    # and the .duckdb file alone then holds everything committed.
                    con.execute("CHECKPOINT")
            except duckdb.Error as error:
                # With an error already on its way up (a full disk, say), that one is reported; what
                # was committed stays in the .wal either way, and DuckDB replays it at the next open.
                if raising:
                    raise StoreError(
                        str(self.path),
                        f"could not be written: {duckdb_detail(error)}",
                        f"what was committed is kept in {self.path.name}.wal; keep that file beside it",
                    ) from error
            finally:
                con.close()

    def _open(self, read_only: bool, settings: StoreSettings) -> duckdb.DuckDBPyConnection:
        """Open the file as the caller asks, first making sure it is a store this citeflow may use."""
        path = self.path
        exists = path.exists()
        if not exists and read_only:
            raise StoreError(
                str(path), "does not exist, so it cannot be opened read-only", "nothing was created"
            )
        if not exists:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise StoreError(
                    str(path), f"its folder could not be created: {error}", "nothing was created"
                ) from error
        must_inspect = exists and not self._checked
        if must_inspect:
            _check_is_duckdb_file(path)
        config = dict(BASE_CONFIG)
        if read_only:
            # Only `citeflow sql` and read-only views open the file read-only: bound what a query may use.
            config["memory_limit"] = settings.sql_memory_limit
        elif self.memory_limit:
            config["memory_limit"] = self.memory_limit
        if not read_only and must_inspect:
            # Looked at read-only before any read-write open, so a file that is not ours stays as it was.
            inspecting = _connect(path, True, settings, BASE_CONFIG)
            try:
                _inspect(path, inspecting)
            finally:
                inspecting.close()
        con = _connect(path, read_only, settings, config)
        try:
            if must_inspect and read_only:
                _inspect(path, con)
            self._bring_up_to_date(con, read_only)
        except BaseException:
            con.close()
            raise
        self._checked = True
        return con

    def _bring_up_to_date(self, con: duckdb.DuckDBPyConnection, read_only: bool) -> None:
        """Check the schema version at every open (another citeflow may have migrated the file since)."""
        try:
            version = current_version(con)
            _check_version(self.path, version)
            if version < LATEST_VERSION:
                if read_only:
                    raise StoreError(
                        str(self.path),
                        f"has schema version {version} but this citeflow needs {LATEST_VERSION}; "
                        "open it once read-write (e.g. citeflow ingest) to migrate",
                        "the store is unchanged",
                    )
                migrate(con)
        except duckdb.Error as error:
            raise StoreError(
                str(self.path), f"could not be migrated: {duckdb_detail(error)}", "the store is unchanged"
            ) from error


_files: dict[Path, SharedFile] = {}
_files_lock = threading.Lock()


def shared_file(path: Path) -> SharedFile:
    """The one SharedFile for a resolved store path in this process."""
    with _files_lock:
        shared = _files.get(path)
        if shared is None:
            shared = _files[path] = SharedFile(path)
        return shared
