"""The `pages` table: every version of every page, ingested or fetched, with the text quotes are checked
against. The same canonical URL with the same content is one row; changed content is a new row (claims
cite the exact version they quote)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from enum import StrEnum

import duckdb
from pydantic import BaseModel

from citeflow.contracts import Origin, Page, PageInput
from citeflow.urls import canonical_url
from storage.rows import as_utc, columns, select, to_column, utc_now

PAGE_COLUMNS = columns(Page)
# The shape DuckDB parses one JSON batch of pages into (stored_at naive UTC, like the column).
PAGE_BATCH_SHAPE = json.dumps(
    [{name: ("TIMESTAMP" if name == "stored_at" else "VARCHAR") for name in Page.model_fields}]
)
# A batch's ids or URLs, given as one JSON array, as a subquery: `x IN` it is a hash join, one pass over
# the table whatever the batch's size (list_contains compared every row with every value of the batch).
_UNNESTED = "(SELECT unnest(from_json(?, '[\"VARCHAR\"]')))"


class Stored(StrEnum):
    """What storing one page did."""

    new = "new"  # a canonical URL the store had never seen
    unchanged = "unchanged"  # the same canonical URL and content was already stored
    changed = "changed"  # a new version of a canonical URL the store already held


class IngestCounts(BaseModel):
    """What a batch of pages did to the store."""

    new: int = 0
    unchanged: int = 0
    changed: int = 0


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def page_id(canonical: str, text_hash: str) -> str:
    return hashlib.sha256(f"{canonical}\n{text_hash}".encode()).hexdigest()[:16]


def json_batch(pages: list[Page]) -> str:
    """Pages as one JSON array whose objects match PAGE_BATCH_SHAPE."""
    return json.dumps(
        [
            {
                **page.model_dump(mode="json", exclude={"stored_at"}),
                "stored_at": to_column(page.stored_at).isoformat(),
            }
            for page in pages
        ]
    )


def _newest_stored_at(cur: duckdb.DuckDBPyConnection) -> datetime | None:
    row = cur.execute("SELECT max(stored_at) FROM pages").fetchone()
    return row[0] if row else None


def put(
    cur: duckdb.DuckDBPyConnection, pages: list[PageInput], max_chars: int | None
) -> list[tuple[Page, Stored]]:
    """Store pages with `cur` (inside the caller's transaction); each comes back with what storing did.

    A few look-ups and one insert for the whole batch, each given its values as one JSON string:
    row-at-a-time statements, or Python lists (DuckDB converts them value by value), made
    ingesting a thousand records take seconds.
    """
    prepared = []
    for page in pages:
        text = page.text if max_chars is None else page.text[:max_chars]
        # An ingested record's fragment names a part of a document (#p10): a page of its own.
        canonical = canonical_url(page.url, keep_fragment=page.origin is Origin.ingested)
        text_hash = content_hash(text)
        prepared.append((page, text, canonical, text_hash, page_id(canonical, text_hash)))
    # Which ids are stored is read from the id column alone; only those pages are read whole (a join
    # reads every row's text: at 136,000 pages, 170 MB a batch, when a new corpus finds none).
    found = [
        row[0]
        for row in cur.execute(
            f"SELECT id FROM pages WHERE id IN {_UNNESTED}", [json.dumps([item[4] for item in prepared])]
        ).fetchall()
    ]
    stored = (
        {
            page.id: page
            for page in select(
                cur, Page, f"SELECT {PAGE_COLUMNS} FROM pages WHERE id IN {_UNNESTED}", [json.dumps(found)]
            )
        }
        if found
        else {}
    )
    known_urls = {
        row[0]
        for row in cur.execute(
            f"SELECT DISTINCT canonical_url FROM pages WHERE canonical_url IN {_UNNESTED}",
            [json.dumps([item[2] for item in prepared])],
        ).fetchall()
    }
    # Strictly increasing, so "the latest version of a URL" is never a tie, even within one batch. One
    # process holds the file at a time, so reading the newest inside the write orders processes too.
    last = _newest_stored_at(cur)
    results: list[tuple[Page, Stored]] = []
    inserted: list[Page] = []
    for page, text, canonical, text_hash, identifier in prepared:
        if identifier in stored:
            # Same URL, same content: keep the first copy and its stored_at ("first stored").
            results.append((stored[identifier], Stored.unchanged))
            continue
        now = utc_now()
        last = now if last is None or now > last else last + timedelta(microseconds=1)
        new = Page(
            id=identifier,
            url=page.url,
            canonical_url=canonical,
            title=page.title,
            text=text,
            content_hash=text_hash,
            origin=page.origin,
            published=page.published,
            stored_at=as_utc(last),
        )
        results.append((new, Stored.changed if canonical in known_urls else Stored.new))
        stored[identifier] = new
        known_urls.add(canonical)
        inserted.append(new)
    if inserted:
        cur.execute(
            f"INSERT INTO pages ({PAGE_COLUMNS}) SELECT {columns(Page, 'r')} "
            f"FROM (SELECT unnest(from_json(?, '{PAGE_BATCH_SHAPE}')) AS r)",
            [json_batch(inserted)],
        )
    return results


def count(cur: duckdb.DuckDBPyConnection) -> int:
    row = cur.execute("SELECT count(*) FROM pages").fetchone()
    return int(row[0]) if row else 0


def get(cur: duckdb.DuckDBPyConnection, identifier: str) -> Page | None:
    found = select(cur, Page, f"SELECT {PAGE_COLUMNS} FROM pages WHERE id = ?", [identifier])
    return found[0] if found else None


def latest(cur: duckdb.DuckDBPyConnection, url: str) -> Page | None:
    """The most recently stored version of a URL (canonicalised first), or None."""
    found = select(
        cur,
        Page,
        f"SELECT {PAGE_COLUMNS} FROM pages WHERE canonical_url = ? ORDER BY stored_at DESC LIMIT 1",
        [canonical_url(url)],
    )
    return found[0] if found else None


def cited(cur: duckdb.DuckDBPyConnection, run_id: str) -> list[Page]:
    """The page versions a run's sources are (pages given a source id), in source order (S2 before S10)."""
    return select(
        cur,
        Page,
        f"SELECT {columns(Page, 'p')} FROM pages p JOIN sources s ON s.page_id = p.id "
        "WHERE s.run_id = ? ORDER BY length(s.source_id), s.source_id",
        [run_id],
    )
