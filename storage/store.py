"""The evidence store: one DuckDB file holding every page, run, claim, sentence, model call and trace.

DuckDB lets one process hold a file read-write and no other process open it at all, so a process
keeps one connection per file (`get_store`) and every method works through its own `cursor()`:
the flow runs Prefect tasks in threads, and cursors of one connection may append concurrently.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

import duckdb
import duckdb_extension_fts
from pydantic import BaseModel

from citeflow.contracts import (
    Claim,
    ClaimStatus,
    ModelCall,
    Origin,
    Page,
    PageInput,
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
from citeflow.urls import canonical_url
from storage.migrations import LATEST_VERSION, current_version, migrate

# A DuckDB file carries this magic at byte 8. Checking it before connecting means a file that is
# not a store is never handed to DuckDB, which could otherwise try to write to it.
DUCKDB_MAGIC = b"DUCK"
DUCKDB_MAGIC_OFFSET = 8

PAGE_COLUMNS = "id, url, canonical_url, title, text, content_hash, origin, published, stored_at"
PAGE_FIELDS = [name.strip() for name in PAGE_COLUMNS.split(",")]
PAGE_BATCH_SHAPE = json.dumps(
    [{name: ("TIMESTAMP" if name == "stored_at" else "VARCHAR") for name in PAGE_FIELDS}]
)
CLAIM_COLUMNS = (
    "id, run_id, subquestion_id, page_id, page_hash, text, quote, quote_start, quote_end, status, "
    "reason, source_id"
)


class RoleUsage(BaseModel):
    """One role's model calls in a run, summed from the model_calls rows."""

    role: str
    calls: int
    prompt_tokens: int
    completion_tokens: int


class IngestCounts(BaseModel):
    """What a batch of pages did to the store."""

    new: int = 0  # a canonical URL the store had never seen
    unchanged: int = 0  # the same canonical URL and content was already stored
    changed: int = 0  # a new version of a canonical URL the store already held


def fts_extension_path() -> Path:
    """The fts extension shipped in the duckdb-extension-fts wheel, so loading it needs no network."""
    return (
        Path(duckdb_extension_fts.__file__).parent
        / "extensions"
        / f"v{duckdb.__version__}"
        / "fts.duckdb_extension"
    )


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def page_id(canonical: str, text_hash: str) -> str:
    return hashlib.sha256(f"{canonical}\n{text_hash}".encode()).hexdigest()[:16]


def utc_now() -> datetime:
    """Naive UTC, the form every TIMESTAMP column holds."""
    return datetime.now(UTC).replace(tzinfo=None)


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _to_column(value: datetime) -> datetime:
    return _as_utc(value).replace(tzinfo=None)


def _natural_key(identifier: str) -> tuple[str, int, str]:
    """C2 before C10: the prefix, then the number, then the raw id as a tie-break."""
    match = re.fullmatch(r"(\D*)(\d+)", identifier)
    if match is None:
        return (identifier, -1, identifier)
    return (match.group(1), int(match.group(2)), identifier)


def _check_is_duckdb_file(path: Path) -> None:
    with path.open("rb") as handle:
        header = handle.read(DUCKDB_MAGIC_OFFSET + len(DUCKDB_MAGIC))
    if header[DUCKDB_MAGIC_OFFSET:] != DUCKDB_MAGIC:
        raise StoreError(
            str(path), "is not a DuckDB database (choose another --db path)", "the file was left untouched"
        )


def _connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    """Connect and load fts; turn DuckDB's open failures into one clear StoreError."""
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.IOException as error:
        if "lock" in str(error).lower():
            raise StoreError(
                str(path),
                "is in use by another citeflow process; wait for it to finish or use another --db",
                "the store is unchanged",
            ) from error
        raise StoreError(str(path), f"could not be opened: {error}", "the file was left untouched") from error
    try:
        con.execute(f"LOAD '{fts_extension_path()}'")
        # After the one file the store needs is loaded, SQL may touch no other file (citeflow sql
        # runs user statements, on this connection too when this process already holds the store).
        con.execute("SET enable_external_access = false")
    except duckdb.Error as error:
        con.close()
        raise StoreError(
            str(fts_extension_path()),
            f"the full-text search extension could not be loaded: {error}",
            "the store is unchanged",
        ) from error
    return con


def _json_batch(pages: list[Page]) -> str:
    """Pages as one JSON array whose objects match PAGE_BATCH_SHAPE (stored_at naive UTC)."""
    return json.dumps(
        [
            {
                **page.model_dump(mode="json", exclude={"stored_at"}),
                "stored_at": _to_column(page.stored_at).isoformat(),
            }
            for page in pages
        ]
    )


def _page_from_row(row: tuple) -> Page:
    return Page(
        id=row[0],
        url=row[1],
        canonical_url=row[2],
        title=row[3],
        text=row[4],
        content_hash=row[5],
        origin=row[6],
        published=row[7],
        stored_at=_as_utc(row[8]),
    )


def _claim_from_row(row: tuple) -> Claim:
    return Claim(
        id=row[0],
        run_id=row[1],
        subquestion_id=row[2],
        page_id=row[3],
        page_hash=row[4],
        text=row[5],
        quote=row[6],
        quote_start=row[7],
        quote_end=row[8],
        status=row[9],
        reason=row[10],
        source_id=row[11],
    )


def _insert(cur: duckdb.DuckDBPyConnection, table: str, records: Sequence[BaseModel], **extra: Any) -> None:
    """Insert contract records into the table that mirrors them: columns are the models' field names
    (storage/migrations.py keeps them equal), plus `extra` columns the same for every row."""
    if not records:
        return
    rows = [
        {name: _to_column(v) if isinstance(v, datetime) else v for name, v in record.model_dump().items()}
        | extra
        for record in records
    ]
    columns = list(rows[0])
    cur.executemany(
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
        [list(row.values()) for row in rows],
    )


class EvidenceStore:
    def __init__(self, path: Path, con: duckdb.DuckDBPyConnection, read_only: bool) -> None:
        self.path = path
        self.read_only = read_only
        self._con = con
        self._closed = False
        # Page writes check-then-insert; serialising them in this process keeps two threads from
        # inserting the same page id at once, and keeps stored_at strictly increasing.
        self._page_lock = threading.Lock()
        self._last_stored_at: datetime | None = None
        # Held by storage/search.py while it checks and rebuilds the full-text index.
        self.index_lock = threading.RLock()

    # -- opening and closing -------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path, read_only: bool = False) -> EvidenceStore:
        path = Path(path)
        if path.exists():
            if not path.is_file():
                raise StoreError(str(path), "is not a file", "nothing was changed")
            _check_is_duckdb_file(path)
        elif read_only:
            raise StoreError(
                str(path), "does not exist, so it cannot be opened read-only", "nothing was created"
            )
        else:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise StoreError(
                    str(path), f"its folder could not be created: {error}", "nothing was created"
                ) from error
        con = _connect(path, read_only)
        try:
            if read_only:
                version = current_version(con)
                if version < LATEST_VERSION:
                    raise StoreError(
                        str(path),
                        f"has schema version {version} but this citeflow needs {LATEST_VERSION}; "
                        "open it once read-write to migrate",
                        "the store is unchanged",
                    )
            else:
                migrate(con)
        except StoreError:
            con.close()
            raise
        except duckdb.Error as error:
            con.close()
            raise StoreError(
                str(path), f"could not be migrated: {error}", "the store is unchanged"
            ) from error
        return cls(path, con, read_only)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._con.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> EvidenceStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @contextmanager
    def cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor of the one connection, for the calling thread; closed when done."""
        if self._closed:
            raise StoreError(str(self.path), "the store was closed", "nothing was read or written")
        cur = self._con.cursor()
        try:
            yield cur
        except (duckdb.IOException, duckdb.TransactionException) as error:
            # A full disk surfaces as either, at a write or at commit; DuckDB rolls the transaction
            # back, so everything committed before is intact. Other transaction conflicts re-raise.
            if isinstance(error, duckdb.TransactionException) and "Could not write" not in str(error):
                raise
            raise StoreError(
                str(self.path),
                f"could not be read or written: {str(error).split(': ')[-1]}",
                "this step was rolled back; everything stored before it is intact",
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

    # -- pages ---------------------------------------------------------------------------------

    def _next_stored_at(self) -> datetime:
        # Strictly increasing, so "the latest version of a URL" is never a tie, even for two
        # versions stored in the same microsecond by one batch.
        now = utc_now()
        if self._last_stored_at is not None and now <= self._last_stored_at:
            now = self._last_stored_at + timedelta(microseconds=1)
        self._last_stored_at = now
        return now

    def _put_pages(
        self, cur: duckdb.DuckDBPyConnection, pages: list[PageInput], max_chars: int | None
    ) -> list[tuple[Page, str]]:
        """Store pages with `cur`; each comes back with 'new', 'unchanged' or 'changed'.

        Two look-ups and one insert for the whole batch, each given its values as one JSON string:
        row-at-a-time statements, or Python lists (DuckDB converts them value by value), made
        ingesting a thousand records take seconds.
        """
        prepared = []
        for page in pages:
            text = page.text if max_chars is None else page.text[:max_chars]
            canonical = canonical_url(page.url, keep_fragment=page.origin is Origin.ingested)
            text_hash = content_hash(text)
            prepared.append((page, text, canonical, text_hash, page_id(canonical, text_hash)))
        ids = [item[4] for item in prepared]
        urls = [item[2] for item in prepared]
        stored = {
            row[0]: _page_from_row(row)
            for row in cur.execute(
                f"SELECT {PAGE_COLUMNS} FROM pages WHERE list_contains(from_json(?, '[\"VARCHAR\"]'), id)",
                [json.dumps(ids)],
            ).fetchall()
        }
        known_urls = {
            row[0]
            for row in cur.execute(
                "SELECT DISTINCT canonical_url FROM pages "
                "WHERE list_contains(from_json(?, '[\"VARCHAR\"]'), canonical_url)",
                [json.dumps(urls)],
            ).fetchall()
        }
        results: list[tuple[Page, str]] = []
        inserted: list[Page] = []
        for page, text, canonical, text_hash, identifier in prepared:
            if identifier in stored:
                # Same URL, same content: keep the first copy and its stored_at ("first stored").
                results.append((stored[identifier], "unchanged"))
                continue
            new = Page(
                id=identifier,
                url=page.url,
                canonical_url=canonical,
                title=page.title,
                text=text,
                content_hash=text_hash,
                origin=page.origin,
                published=page.published,
                stored_at=_as_utc(self._next_stored_at()),
            )
            results.append((new, "changed" if canonical in known_urls else "new"))
            stored[identifier] = new
            known_urls.add(canonical)
            inserted.append(new)
        if inserted:
            cur.execute(
                f"INSERT INTO pages ({PAGE_COLUMNS}) SELECT {', '.join('r.' + c for c in PAGE_FIELDS)} "
                f"FROM (SELECT unnest(from_json(?, '{PAGE_BATCH_SHAPE}')) AS r)",
                [_json_batch(inserted)],
            )
        return results

    def put_page(self, page: PageInput, max_chars: int | None = None) -> tuple[Page, bool]:
        """Store a page unless the same canonical URL and content is already stored.

        Returns the stored page and whether a row was created. Changed content at a known URL is
        a new row with a new id; the old version stays, since claims cite it by hash.
        """
        with self._page_lock, self.transaction() as cur:
            [(stored, outcome)] = self._put_pages(cur, [page], max_chars)
        return stored, outcome != "unchanged"

    def put_pages(self, pages: list[PageInput], max_chars: int | None = None) -> IngestCounts:
        """Store a batch in one transaction: if any page fails, none is stored."""
        counts = IngestCounts()
        with self._page_lock, self.transaction() as cur:
            for _, outcome in self._put_pages(cur, pages, max_chars):
                setattr(counts, outcome, getattr(counts, outcome) + 1)
        return counts

    def page_count(self) -> int:
        with self.cursor() as cur:
            (count,) = cur.execute("SELECT count(*) FROM pages").fetchone()  # type: ignore[misc]
        return int(count)

    def get_page(self, page_id: str) -> Page:
        with self.cursor() as cur:
            row = cur.execute(f"SELECT {PAGE_COLUMNS} FROM pages WHERE id = ?", [page_id]).fetchone()
        if row is None:
            raise StoreError(f"page {page_id}", "is not in the store", "the store is unchanged")
        return _page_from_row(row)

    def latest_page(self, url: str) -> Page | None:
        """The most recently stored version of a URL (canonicalised first), or None."""
        with self.cursor() as cur:
            row = cur.execute(
                f"SELECT {PAGE_COLUMNS} FROM pages WHERE canonical_url = ? ORDER BY stored_at DESC LIMIT 1",
                [canonical_url(url)],
            ).fetchone()
        return None if row is None else _page_from_row(row)

    # -- runs ----------------------------------------------------------------------------------

    def start_run(self, run_id: str, question: str, engine: str, search: str, settings_json: str) -> None:
        with self.cursor() as cur:
            cur.execute(
                "INSERT INTO runs (run_id, question, status, engine, search, settings, started_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [run_id, question, RunStatus.running.value, engine, search, settings_json, utc_now()],
            )

    def finish_run(
        self,
        run_id: str,
        status: RunStatus,
        report_markdown: str,
        report_path: str | None,
        metrics: RunMetrics,
    ) -> None:
        with self.cursor() as cur:
            updated = cur.execute(
                "UPDATE runs SET status = ?, ended_at = ?, wall_seconds = ?, report_markdown = ?, "
                "report_path = ?, metrics = ? WHERE run_id = ? RETURNING run_id",
                [
                    status.value,
                    utc_now(),
                    metrics.wall_seconds,
                    report_markdown,
                    report_path,
                    metrics.model_dump_json(),
                    run_id,
                ],
            ).fetchall()
        if not updated:
            raise StoreError(
                f"run {run_id}", "was never started, so it cannot be finished", "no row was written"
            )

    def add_subquestions(self, run_id: str, subquestions: list[SubQuestion]) -> None:
        with self.transaction() as cur:
            _insert(cur, "subquestions", subquestions, run_id=run_id)

    def subquestions(self, run_id: str) -> list[SubQuestion]:
        with self.cursor() as cur:
            rows = cur.execute(
                "SELECT id, position, text, query FROM subquestions WHERE run_id = ? ORDER BY position, id",
                [run_id],
            ).fetchall()
        return [SubQuestion(id=r[0], position=r[1], text=r[2], query=r[3]) for r in rows]

    def add_search_results(self, run_id: str, subquestion_id: str, results: list[SearchResult]) -> None:
        with self.transaction() as cur:
            _insert(cur, "search_results", results, run_id=run_id, subquestion_id=subquestion_id)

    def add_run_source(self, source: RunSource) -> None:
        with self.cursor() as cur:
            _insert(cur, "run_sources", [source])

    def run_sources(self, run_id: str) -> list[RunSource]:
        with self.cursor() as cur:
            rows = cur.execute(
                "SELECT rs.run_id, rs.subquestion_id, rs.page_id, rs.provider, rs.rank, rs.source_id "
                "FROM run_sources rs LEFT JOIN subquestions sq "
                "ON sq.run_id = rs.run_id AND sq.id = rs.subquestion_id "
                "WHERE rs.run_id = ? ORDER BY sq.position NULLS LAST, rs.subquestion_id, rs.rank, rs.page_id",
                [run_id],
            ).fetchall()
        return [
            RunSource(
                run_id=r[0], subquestion_id=r[1], page_id=r[2], provider=r[3], rank=r[4], source_id=r[5]
            )
            for r in rows
        ]

    # -- claims and sources --------------------------------------------------------------------

    def add_claims(self, claims: list[Claim]) -> None:
        with self.transaction() as cur:
            _insert(cur, "claims", claims)

    def claims(self, run_id: str, status: ClaimStatus | None = None) -> list[Claim]:
        """The run's claims, C1, C2, ... C10 in natural order; only those with `status` if given."""
        sql = f"SELECT {CLAIM_COLUMNS} FROM claims WHERE run_id = ?"
        params: list[str] = [run_id]
        if status is not None:
            sql += " AND status = ?"
            params.append(status.value)
        with self.cursor() as cur:
            rows = cur.execute(sql, params).fetchall()
        return sorted((_claim_from_row(r) for r in rows), key=lambda c: _natural_key(c.id))

    def number_sources(self, run_id: str) -> list[Source]:
        """Number S1, S2, ... the pages with at least one verified claim, in report order.

        Order is the first (sub-question position, search rank) at which the run read the page.
        Running it again renumbers from scratch, so it is safe to call after more claims arrive.
        """
        with self.transaction() as cur:
            rows = cur.execute(
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
                SELECT p.id, p.url, p.title, p.stored_at
                FROM cited c
                JOIN pages p ON p.id = c.page_id
                LEFT JOIN first_read f ON f.page_id = c.page_id
                ORDER BY f.position NULLS LAST, f.rank NULLS LAST, p.id
                """,
                {"run": run_id, "verified": ClaimStatus.verified.value},
            ).fetchall()
            cur.execute("UPDATE run_sources SET source_id = NULL WHERE run_id = ?", [run_id])
            cur.execute("UPDATE claims SET source_id = NULL WHERE run_id = ?", [run_id])
            sources: list[Source] = []
            for number, (page, url, title, stored_at) in enumerate(rows, start=1):
                source = Source(
                    id=f"S{number}", page_id=page, url=url, title=title, stored_at=_as_utc(stored_at)
                )
                cur.execute(
                    "UPDATE run_sources SET source_id = ? WHERE run_id = ? AND page_id = ?",
                    [source.id, run_id, page],
                )
                cur.execute(
                    "UPDATE claims SET source_id = ? WHERE run_id = ? AND page_id = ? AND status = ?",
                    [source.id, run_id, page, ClaimStatus.verified.value],
                )
                sources.append(source)
        return sources

    def renumber_sources(self, run_id: str, renumbered: dict[str, str]) -> None:
        """Give the run's sources new ids (old id -> new id) in claims and run_sources alike, so the store
        numbers them as the report does (in the order it first cites them)."""
        with self.transaction() as cur:
            for table in ("claims", "run_sources"):
                # Through a prefix no id has, so that S2 -> S1 never meets the S1 -> S2 of the same pass.
                cur.execute(
                    f"UPDATE {table} SET source_id = '~' || source_id "
                    "WHERE run_id = ? AND source_id IS NOT NULL",
                    [run_id],
                )
                for old, new in renumbered.items():
                    cur.execute(
                        f"UPDATE {table} SET source_id = ? WHERE run_id = ? AND source_id = ?",
                        [new, run_id, f"~{old}"],
                    )

    # -- report, usage, traces, errors ---------------------------------------------------------

    def add_report_sentences(self, sentences: list[ReportSentence]) -> None:
        with self.transaction() as cur:
            _insert(cur, "report_sentences", sentences)

    def add_model_call(self, call: ModelCall) -> None:
        with self.cursor() as cur:
            _insert(cur, "model_calls", [call], called_at=utc_now())

    def run_tokens(self, run_id: str) -> tuple[int, int]:
        """(prompt, completion) tokens the run's model calls used so far: the budget reads this."""
        with self.cursor() as cur:
            row = cur.execute(
                "SELECT coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0) "
                "FROM model_calls WHERE run_id = ?",
                [run_id],
            ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def role_usage(self, run_id: str) -> dict[str, RoleUsage]:
        """Calls and tokens per role, for the run metrics."""
        with self.cursor() as cur:
            rows = cur.execute(
                "SELECT role, count(*), sum(prompt_tokens), sum(completion_tokens) FROM model_calls "
                "WHERE run_id = ? GROUP BY role ORDER BY role",
                [run_id],
            ).fetchall()
        return {
            r[0]: RoleUsage(role=r[0], calls=r[1], prompt_tokens=int(r[2]), completion_tokens=int(r[3]))
            for r in rows
        }

    def add_trace(self, trace: Trace) -> None:
        with self.cursor() as cur:
            _insert(cur, "traces", [trace])

    def add_error(self, error: RunError) -> None:
        with self.cursor() as cur:
            _insert(cur, "errors", [error], recorded_at=utc_now())

    def errors(self, run_id: str) -> list[RunError]:
        with self.cursor() as cur:
            rows = cur.execute(
                "SELECT run_id, stage, detail, subquestion_id FROM errors "
                "WHERE run_id = ? ORDER BY recorded_at",
                [run_id],
            ).fetchall()
        return [RunError(run_id=r[0], stage=r[1], detail=r[2], subquestion_id=r[3]) for r in rows]

    # -- user SQL ------------------------------------------------------------------------------

    def query(self, sql: str) -> tuple[list[str], list[tuple]]:
        """Run one read-only statement for `citeflow sql`; anything that could write is refused.

        The statement is parsed first and refused unless it is a single SELECT; it then runs in
        a transaction that is always rolled back, so even a write the parser missed is undone.
        """
        check_read_only_sql(sql)
        with self.cursor() as cur:
            cur.begin()
            try:
                return _run_select(cur, sql)
            finally:
                cur.rollback()


def _parser() -> duckdb.DuckDBPyConnection:
    # A bare in-memory connection: with fts not loaded and autoloading off, parsing a PRAGMA
    # that calls an extension fails instead of running or downloading anything.
    return duckdb.connect(
        ":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )


def check_read_only_sql(sql: str) -> None:
    """Raise InputError unless `sql` is exactly one SELECT.

    SHOW, DESCRIBE, SUMMARIZE and pragmas that only read (PRAGMA version) parse as SELECT too.
    """
    if not sql.strip():
        raise InputError("SQL", "the statement is empty", "the store is unchanged")
    parser = _parser()
    try:
        statements = parser.extract_statements(sql)
    except duckdb.Error as error:
        raise InputError(
            "SQL", f"is not a statement citeflow can run read-only: {error}", "the store is unchanged"
        ) from error
    finally:
        parser.close()
    if len(statements) != 1:
        raise InputError(
            "SQL", f"has {len(statements)} statements; give exactly one SELECT", "the store is unchanged"
        )
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise InputError(
            "SQL",
            f"is a {kind.name} statement; `citeflow sql` only runs a single read-only SELECT",
            "the store is unchanged",
        )


def _run_select(cur: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], list[tuple]]:
    try:
        cur.execute(sql)
        rows = cur.fetchall()
    except duckdb.Error as error:
        raise InputError("SQL", f"failed: {error}", "the store is unchanged") from error
    columns = [d[0] for d in cur.description] if cur.description else []
    return columns, rows


def read_only_query(path: Path, sql: str) -> tuple[list[str], list[tuple]]:
    """Run one SELECT on the store at `path` through a read-only connection of its own.

    Belt and braces: the statement type is checked, the connection cannot write, and every store
    connection has external file access switched off, so the SQL cannot read or write other files.
    """
    check_read_only_sql(sql)
    path = Path(path)
    with _stores_lock:
        shared = _stores.get(path.resolve())
    if shared is not None and not shared.closed:
        # This process already holds the file read-write, and DuckDB refuses a second
        # connection to it with another configuration; the rolled-back cursor is the guard.
        return shared.query(sql)
    with EvidenceStore.open(path, read_only=True) as store:
        return store.query(sql)


_stores: dict[Path, EvidenceStore] = {}
_stores_lock = threading.Lock()


def get_store(path: Path) -> EvidenceStore:
    """The one read-write store for `path` in this process, opened on first use.

    Prefect runs tasks in threads of one process; they must share one connection, since DuckDB
    will not let a second connection with its own lock open the same file.
    """
    key = Path(path).resolve()
    with _stores_lock:
        store = _stores.get(key)
        if store is None or store.closed:
            store = EvidenceStore.open(key)
            _stores[key] = store
        return store


def close_stores() -> None:
    """Close every store get_store opened (end of a flow run, end of a test)."""
    with _stores_lock:
        for store in _stores.values():
            store.close()
        _stores.clear()
