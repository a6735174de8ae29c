"""The evidence store: one DuckDB file holding every page, run, claim, sentence, model call and trace.

EvidenceStore is the one way the rest of citeflow reaches that file. It holds the file only while it
reads or writes: each method opens it for its own duration, or joins a `session()` that batches a
stage's reads and writes under one open; when the last user in the process leaves, the file is
checkpointed and released, so other processes (`citeflow sql`, a second run) get their turn.

What each table holds and how it is read or written lives in a module named for it: pages.py, runs.py,
claims.py, calls.py, traces.py; files.py opens the file, user_sql.py runs `citeflow sql`.

The same store may be a DuckLake instead (storage/lake.py): then the process keeps the lake attached,
sessions cost nothing, and every write goes through `write`, which retries a transaction DuckLake
refused for conflicting with another process's commit.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import duckdb

from citeflow.config import StoreSettings
from citeflow.contracts import (
    Claim,
    ClaimStatus,
    ModelCall,
    Page,
    PageInput,
    ProcessId,
    ReportSentence,
    RunError,
    RunMetrics,
    RunSource,
    RunStatus,
    SearchResult,
    Source,
    SubQuestion,
    Trace,
)
from citeflow.errors import InputError, StoreError
from storage import calls as calls_table
from storage import claims as claims_table
from storage import pages as pages_table
from storage import runs as runs_table
from storage import traces as traces_table
from storage.calls import RoleUsage
from storage.files import FILE_CATALOG, SharedFile, duckdb_detail, first_line, shared_file, store_path
from storage.lake import (
    CATALOG,
    INDEX_CATALOG,
    SharedLake,
    attach,
    is_lake,
    lock_down,
    shared_lake,
    snapshot_of,
)
from storage.lake import compact as compact_lake
from storage.pages import IngestCounts, Stored, content_hash, page_id
from storage.rows import utc_now
from storage.runs import RunSummary
from storage.user_sql import check_read_only_sql, run_select

__all__ = [
    "EvidenceStore",
    "IngestCounts",
    "RoleUsage",
    "RunSummary",
    "close_stores",
    "content_hash",
    "get_store",
    "page_id",
    "read_only_query",
    "utc_now",
]

log = logging.getLogger("citeflow.store")

ROLLED_BACK = "this step was rolled back; everything stored before it is intact"
# A lake write that conflicts with another process's commit is tried again after a random pause that
# grows from FIRST_RETRY_SECONDS to MAX_RETRY_SECONDS (a commit to a PostgreSQL catalog takes tens of ms).
FIRST_RETRY_SECONDS = 0.02
MAX_RETRY_SECONDS = 1.0
# What a refused lake commit says: a conflict with another commit; DuckLake's own retries of the commit
# (10, about 11 s) used up while many processes commit at once; or (on a SQLite catalog) a lock SQLite will
# not wait for, because waiting would deadlock a reader turning writer (duckdb/ducklake#1309).
CONFLICTS = ("Transaction conflict", "Exceeded the maximum retry count", "database is locked")
# DuckLake keeps no PRIMARY KEY, so two processes could each find a page id missing and insert it.
# Every page write on a lake also updates this one-row table (unused on a lake otherwise: the
# full-text index is per process there), so of two page writes committing at once DuckLake refuses the
# second, which is retried and then finds the page stored: each id exactly once.
PAGE_WRITE_GUARD = "UPDATE search_index SET built_at = now()::TIMESTAMP"
T = TypeVar("T")


class EvidenceStore:
    """The store at one path. Creating one touches no file: the first method or session opens it."""

    def __init__(self, path: Path, read_only: bool = False, settings: StoreSettings | None = None) -> None:
        self.path = store_path(path)
        self.read_only = read_only
        self.settings = settings or StoreSettings()
        self.is_lake = is_lake(self.path)
        self._file: SharedLake | Any = shared_lake(self.path) if self.is_lake else shared_file(self.path)
        self._closed = False

    # -- opening, sessions and cursors -------------------------------------------------------------

    @classmethod
    def open(
        cls, path: Path, read_only: bool = False, settings: StoreSettings | None = None
    ) -> EvidenceStore:
        """The store at `path`, checked now (and created or migrated unless read-only), so a bad file
        or path fails here rather than at first use. The file is not held once this returns."""
        store = cls(path, read_only, settings)
        with store.session():
            pass
        return store

    def close(self) -> None:
        """Refuse further use of this object (the file itself is released after every session)."""
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> EvidenceStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def file_is_open(self) -> bool:
        """Whether this process has the file open now (a method or session is running)."""
        return self._file.is_open

    @property
    def index_lock(self) -> AbstractContextManager[bool]:
        """Held by storage/search.py while it checks, rebuilds or reads the full-text index."""
        return self._file.index_lock

    @contextmanager
    def session(self) -> Iterator[EvidenceStore]:
        """Hold the file open for the block, so the methods called in it share one open.

        Sessions nest and are shared by the threads of this process. Keep them short: while one is
        open no other process can read or write the store, so never wait for a model or the network
        inside one. Leaving the last one checkpoints and releases the file.
        """
        with self._hold():
            yield self

    @contextmanager
    def _hold(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if self._closed:
            raise StoreError(str(self.path), "the store was closed", "nothing was read or written")
        with self._file.hold(self.read_only, self.settings) as con:
            yield con

    @contextmanager
    def cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor for the calling thread, inside a session; closed when done."""
        with self._hold() as con:
            cur = con.cursor()
            try:
                # A new cursor starts in the in-memory database the store is attached to.
                cur.execute(f"USE {CATALOG if self.is_lake else FILE_CATALOG}")
                yield cur
            except duckdb.OutOfMemoryException as error:
                raise StoreError(
                    str(self.path), f"ran out of memory: {duckdb_detail(error)}", ROLLED_BACK
                ) from error
            except (duckdb.IOException, duckdb.TransactionException) as error:
                # A full disk surfaces as either, at a write or at commit; DuckDB rolls the transaction
                # back, so everything committed before is intact. Other transaction conflicts re-raise.
                if isinstance(error, duckdb.TransactionException) and "Could not write" not in str(error):
                    raise
                raise StoreError(
                    str(self.path),
                    f"could not be read or written: {str(error).split(': ')[-1]}",
                    ROLLED_BACK,
                ) from error
            finally:
                cur.close()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor inside one transaction: committed if the block returns, rolled back if it raises."""
        with self.cursor() as cur:
            cur.begin()
            try:
                yield cur
            except BaseException:
                cur.rollback()
                raise
            cur.commit()

    def write(self, change: Callable[[duckdb.DuckDBPyConnection], T], pages: bool = False) -> T:
        """Run `change` in one transaction and return what it returns. On a lake, a commit refused for
        conflicting with another process's is rolled back and `change` runs again, on the lake as it
        is now, with a growing random pause, for up to settings.wait_seconds; `pages` also makes it
        conflict with every other page write (PAGE_WRITE_GUARD)."""
        deadline = time.monotonic() + self.settings.wait_seconds
        delay = FIRST_RETRY_SECONDS
        while True:
            try:
                with self.transaction() as cur:
                    result = change(cur)
                    if pages and self.is_lake:
                        cur.execute(PAGE_WRITE_GUARD)
                return result
            except duckdb.Error as error:
                if not self.is_lake or not _conflicted(error) or time.monotonic() >= deadline:
                    raise
                log.debug("lake write conflicted with another commit; trying again: %s", first_line(error))
                time.sleep(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, MAX_RETRY_SECONDS)

    @contextmanager
    def index_cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor where the full-text index lives: the store itself, or on a lake this process's
        in-memory database, where `pages` is a view of the lake's pages (storage/search.py)."""
        with self.cursor() as cur:
            if self.is_lake:
                cur.execute(f"USE {INDEX_CATALOG}")
                cur.execute(f"CREATE VIEW IF NOT EXISTS pages AS SELECT * FROM {CATALOG}.main.pages")
                cur.execute(
                    "CREATE TABLE IF NOT EXISTS search_index "
                    "(pages BIGINT NOT NULL, max_stored_at TIMESTAMP, built_at TIMESTAMP NOT NULL)"
                )
            yield cur

    @contextmanager
    def index_transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self.index_cursor() as cur:
            cur.begin()
            try:
                yield cur
            except BaseException:
                cur.rollback()
                raise
            cur.commit()

    def load_fts(self) -> None:
        """Inside a session: make full-text search available, and shut the connection off from every
        other file (storage/files.py says why this waits until needed)."""
        self._file.load_fts()

    # -- pages --------------------------------------------------------------------------------------

    def put_page(self, page: PageInput, max_chars: int | None = None) -> tuple[Page, bool]:
        """Store a page unless the same canonical URL and content is already stored.

        Returns the stored page and whether a row was created. Changed content at a known URL is
        a new row with a new id; the old version stays, since claims cite it by hash.
        """
        [stored] = self.put_fetched([page], max_chars)
        return stored

    def put_fetched(self, pages: list[PageInput], max_chars: int | None = None) -> list[tuple[Page, bool]]:
        """`put_page` for each page, in one transaction: on a lake every page write conflicts with every
        other (PAGE_WRITE_GUARD), so a researcher's pages commit at once rather than one by one."""
        return [(page, outcome is not Stored.unchanged) for page, outcome in self._put(pages, max_chars)]

    def put_pages(self, pages: list[PageInput], max_chars: int | None = None) -> IngestCounts:
        """Store a batch in one transaction: if any page fails, none is stored."""
        counts = IngestCounts()
        for _, outcome in self._put(pages, max_chars):
            setattr(counts, outcome.value, getattr(counts, outcome.value) + 1)
        return counts

    def _put(self, pages: list[PageInput], max_chars: int | None) -> list[tuple[Page, Stored]]:
        if not pages:
            return []
        with self._file.page_lock:
            return self.write(lambda cur: pages_table.put(cur, pages, max_chars), pages=True)

    @contextmanager
    def memory_limit(self, limit: str) -> Iterator[None]:
        """For the block, DuckDB holds at most `limit` in memory for this process's read-write
        connections to the store file (writing what is beyond it to disk): the one open now and those
        opened in the block. A lake is left as it is: its connection is in memory and would spill to a
        folder in the working directory."""
        if self.is_lake:
            yield
            return
        shared = self._file
        assert isinstance(shared, SharedFile)
        before, shared.memory_limit = shared.memory_limit, limit
        try:
            if shared.is_open and not self.read_only:
                self._set_memory_limit(limit)
            yield
        finally:
            shared.memory_limit = before
            if shared.is_open and not self.read_only:
                self._set_memory_limit(before)

    def _set_memory_limit(self, limit: str | None) -> None:
        """Set DuckDB's memory_limit on the open connection; None puts back DuckDB's default."""
        with self.cursor() as cur:
            if limit is None:
                cur.execute("RESET memory_limit")
            else:
                cur.execute("SET memory_limit = ?", [limit])

    def identity(self) -> str:
        """This store and no other: its resolved path and when it was created (a store deleted and made
        again at the same path is another store)."""
        with self.cursor() as cur:
            (created,) = cur.execute(  # type: ignore[misc]
                "SELECT min(applied_at) FROM schema_migrations"
            ).fetchone()
        where = self.path if self.is_lake else self.path.resolve()
        return f"{where}@{created}"

    def page_count(self) -> int:
        with self.cursor() as cur:
            return pages_table.count(cur)

    def get_page(self, page_id: str) -> Page:
        with self.cursor() as cur:
            page = pages_table.get(cur, page_id)
        if page is None:
            raise StoreError(f"page {page_id}", "is not in the store", "the store is unchanged")
        return page

    def latest_page(self, url: str) -> Page | None:
        """The most recently stored version of a URL (canonicalised first), or None."""
        with self.cursor() as cur:
            return pages_table.latest(cur, url)

    # -- runs ---------------------------------------------------------------------------------------

    def start_run(
        self,
        run_id: str,
        question: str,
        engine: str,
        search: str,
        settings_json: str,
        settings_hash: str = "",
        owner: ProcessId | None = None,
        topic: str | None = None,
    ) -> None:
        """Record a run as running, with the settings it runs with, the process that runs it and the
        recurring topic it researches, if any."""
        self.write(
            lambda cur: runs_table.start(
                cur, run_id, question, engine, search, settings_json, settings_hash, owner, topic
            )
        )

    def cited_pages(self, run_id: str) -> list[Page]:
        """The page versions a run's sources are (pages with a source id), in source order."""
        with self.cursor() as cur:
            return pages_table.cited(cur, run_id)

    def end_run(self, run_id: str, status: RunStatus, why: str) -> bool:
        """End a run that is still `running` with no report (failed, cancelled, crashed), saying why.
        False when the run had already ended: a run's first final status is the one that stands."""
        return self.write(lambda cur: runs_table.end(cur, run_id, status, why))

    def running_runs(self) -> dict[str, ProcessId | None]:
        """Runs still marked `running`, with the process that runs each (None for rows older than that)."""
        with self.cursor() as cur:
            return runs_table.running(cur)

    def recent_runs(self, limit: int | None = None, topic: str | None = None) -> list[RunSummary]:
        """Runs newest first: all of them, or the last `limit`; only a recurring topic's when given."""
        with self.cursor() as cur:
            return runs_table.recent(cur, limit, topic)

    def finish_run(
        self,
        run_id: str,
        status: RunStatus,
        report_markdown: str,
        report_path: str | None,
        metrics: RunMetrics,
        report_kind: str = "answer",
    ) -> None:
        self.write(
            lambda cur: runs_table.finish(
                cur, run_id, status, report_markdown, report_path, metrics, report_kind
            )
        )

    def add_subquestions(self, run_id: str, subquestions: list[SubQuestion]) -> None:
        self.write(lambda cur: runs_table.add_subquestions(cur, run_id, subquestions))

    def subquestions(self, run_id: str) -> list[SubQuestion]:
        with self.cursor() as cur:
            return runs_table.subquestions(cur, run_id)

    def add_research(
        self,
        run_id: str,
        subquestion_id: str,
        results: list[SearchResult],
        sources: list[RunSource],
        errors: list[RunError],
    ) -> None:
        """What the run read for one sub-question (search results, the pages it kept, what failed), in one
        commit: on a lake each commit is a snapshot that concurrent runs race for."""

        def add(cur: duckdb.DuckDBPyConnection) -> None:
            runs_table.add_search_results(cur, run_id, subquestion_id, results)
            runs_table.add_sources(cur, sources)
            for error in errors:
                traces_table.add_error(cur, error)

        self.write(add)

    def run_sources(self, run_id: str) -> list[RunSource]:
        with self.cursor() as cur:
            return runs_table.sources(cur, run_id)

    # -- claims, sources and report sentences -------------------------------------------------------

    def add_claims(self, run_id: str, claims: list[Claim]) -> None:
        """The claims a run checked, filed under the run (a claim reused from the cache names none)."""
        self.write(lambda cur: claims_table.add(cur, run_id, claims))

    def claims(self, run_id: str, status: ClaimStatus | None = None) -> list[Claim]:
        """The run's claims, C1, C2, ... C10 in natural order; only those with `status` if given."""
        with self.cursor() as cur:
            return claims_table.of_run(cur, run_id, status)

    def number_sources(self, run_id: str) -> list[Source]:
        """Number S1, S2, ... the pages with at least one verified claim, in report order (see
        storage/claims.py); safe to call again after more claims arrive."""
        return self.write(lambda cur: claims_table.number_sources(cur, run_id))

    def renumber_sources(self, run_id: str, numbers: dict[str, str]) -> None:
        """Give the run's sources new ids (old id -> new id), so the store numbers them as the report
        does (in the order it first cites them)."""
        self.write(lambda cur: claims_table.renumber_sources(cur, run_id, numbers))

    def add_report_sentences(self, sentences: list[ReportSentence]) -> None:
        self.write(lambda cur: claims_table.add_sentences(cur, sentences))

    def report_sentences(self, run_id: str) -> list[ReportSentence]:
        with self.cursor() as cur:
            return claims_table.sentences(cur, run_id)

    # -- model calls, traces, errors ----------------------------------------------------------------

    def add_model_call(self, call: ModelCall) -> None:
        self.write(lambda cur: calls_table.add(cur, call))

    def run_tokens(self, run_id: str) -> tuple[int, int]:
        """(prompt, completion) tokens the run's model calls used so far: the budget reads this."""
        with self.cursor() as cur:
            return calls_table.run_tokens(cur, run_id)

    def role_usage(self, run_id: str) -> dict[str, RoleUsage]:
        """Calls and tokens per role, for the run metrics."""
        with self.cursor() as cur:
            return calls_table.role_usage(cur, run_id)

    def add_trace(self, trace: Trace) -> None:
        self.write(lambda cur: traces_table.add_trace(cur, trace))

    def add_error(self, error: RunError) -> None:
        self.write(lambda cur: traces_table.add_error(cur, error))

    def errors(self, run_id: str) -> list[RunError]:
        with self.cursor() as cur:
            return traces_table.errors(cur, run_id)

    # -- maintenance --------------------------------------------------------------------------------

    def compact(self, keep_days: int) -> dict[str, int]:
        """On a lake: merge small data files, expire snapshots older than `keep_days`, delete unneeded
        files (storage/lake.compact). A .duckdb file needs none of it."""
        if not self.is_lake:
            raise InputError(
                str(self.path),
                "is a .duckdb file; compaction is for a DuckLake store",
                "the store is unchanged",
            )
        with self.cursor() as cur:
            return compact_lake(cur, keep_days)

    # -- user SQL -----------------------------------------------------------------------------------

    def query(self, sql: str) -> tuple[list[str], list[tuple]]:
        """Run one read-only statement for `citeflow sql` (storage/user_sql.py): anything that could
        write is refused, and it stops at settings.sql_timeout_seconds."""
        check_read_only_sql(sql)
        with self.session():
            self.load_fts()  # users rank pages with match_bm25; and no file but the store is reachable
            with self.cursor() as cur:
                return run_select(cur, sql, self.settings)


def _conflicted(error: duckdb.Error) -> bool:
    return any(marker in str(error) for marker in CONFLICTS)


def read_only_query(
    path: Path, sql: str, settings: StoreSettings | None = None, at: str | None = None
) -> tuple[list[str], list[tuple]]:
    """Run one SELECT on the store at `path`, opening it read-only (with settings.sql_memory_limit)
    unless this process already has it open, in which case the query joins that connection.

    `at` (a run id or a UTC timestamp) reads a lake as it was then: when that run finished, or at the
    last snapshot committed by that time (storage/lake.snapshot_of)."""
    check_read_only_sql(sql)
    store = EvidenceStore(path, read_only=True, settings=settings)
    if at is None:
        return store.query(sql)
    if not store.is_lake:
        raise InputError(
            "--at",
            "reads a DuckLake store as it was at a run or time; this store is a .duckdb file, which keeps "
            "no snapshots (citeflow store copy moves it into a lake)",
            "the store is unchanged",
        )
    with store.cursor() as cur:
        snapshot = snapshot_of(cur, at)
    settings = store.settings
    con = attach(str(store.path), settings.data_path, True, settings.sql_memory_limit, snapshot)
    try:
        con.execute(f"USE {CATALOG}")
        lock_down(con)
        return run_select(con, sql, settings)
    finally:
        con.close()


_stores: dict[Path, EvidenceStore] = {}
_stores_lock = threading.Lock()


def get_store(path: Path, settings: StoreSettings | None = None) -> EvidenceStore:
    """This process's read-write store for `path`. A file already there is checked at once, so a bad
    one fails here; a missing one is created by the first method that needs it. `settings`, when
    given, replace the ones this process uses for the path."""
    key = store_path(path)
    with _stores_lock:
        store = _stores.get(key)
        if store is None or store.closed:
            store = EvidenceStore(key, settings=settings)
            if is_lake(key) or key.exists():
                with store.session():
                    pass
            _stores[key] = store
        elif settings is not None:
            store.settings = settings
        return store


def close_stores() -> None:
    """Forget every store get_store handed out (end of a flow run, end of a test); any later use of
    them is refused. Files are released after every session already, so nothing else is closed."""
    with _stores_lock:
        for store in _stores.values():
            store.close()
        _stores.clear()
