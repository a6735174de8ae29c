"""Local search: BM25 over the pages in the evidence store.

DuckDB's fts extension was chosen over an in-memory library such as bm25s because the index lives
in the same file as the evidence: nothing to rebuild at start-up, nothing to keep in step with a
second file, and users can rank pages from SQL with fts_main_pages.match_bm25. The extension binary
comes from the duckdb-extension-fts wheel, so no network is needed (storage/files.py loads it).

The fts index does not follow inserts. The `search_index` table records the page count and newest
stored_at the index was built from; a search first compares them with `pages` and rebuilds if they
differ. Only the latest version of each canonical URL is returned.
"""

from __future__ import annotations

import re
from datetime import datetime

import duckdb

from citeflow.contracts import SearchResult
from storage.rows import utc_now
from storage.store import EvidenceStore

PROVIDER = "local"
SNIPPET_CHARS = 200
# A title match counts this much more than the same terms in the body: a query naming a topic
# should find the page about it before pages that merely mention it.
TITLE_WEIGHT = 2.0

SEARCH_SQL = f"""
WITH latest AS (
    SELECT id FROM pages
    QUALIFY row_number() OVER (PARTITION BY canonical_url ORDER BY stored_at DESC) = 1
),
scored AS (
    SELECT p.id, p.url, p.title, p.text,
           fts_main_pages.match_bm25(p.id, $query) AS overall,
           fts_main_pages.match_bm25(p.id, $query, fields := 'title') AS in_title
    FROM pages p
    WHERE p.id IN (SELECT id FROM latest)
)
SELECT id, url, title, text
FROM scored
WHERE overall IS NOT NULL
ORDER BY overall + {TITLE_WEIGHT} * coalesce(in_title, 0) DESC, id
LIMIT $limit
"""


def _pages_state(cur: duckdb.DuckDBPyConnection) -> tuple[int, datetime | None]:
    """What an index built now would cover: the page count and the newest stored_at."""
    count, newest = cur.execute("SELECT count(*), max(stored_at) FROM pages").fetchone()  # type: ignore[misc]
    return count, newest


def index_state(store: EvidenceStore) -> tuple[int, str | None]:
    """The state of `pages` an index built now would cover, as plain values (for cache keys)."""
    with store.cursor() as cur:
        count, newest = _pages_state(cur)
    return count, newest.isoformat() if newest else None


def index_is_stale(store: EvidenceStore) -> bool:
    with store.cursor() as cur:
        built = cur.execute("SELECT pages, max_stored_at FROM search_index").fetchone()
        (schemas,) = cur.execute(  # type: ignore[misc]
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'fts_main_pages'"
        ).fetchone()
        return built is None or schemas == 0 or tuple(built) != _pages_state(cur)


def refresh_index(store: EvidenceStore) -> None:
    """Rebuild the full-text index if pages changed since it was built.

    An empty store gets no index: fts cannot index nothing, and a search of nothing is [].
    """
    if store.read_only:
        return  # a read-only store searches the index as it was last built
    with store.index_lock, store.session():
        if not index_is_stale(store):
            return
        store.load_fts()
        with store.transaction() as cur:
            count, newest = _pages_state(cur)
            if count:
                cur.execute("PRAGMA create_fts_index('pages', 'id', 'title', 'text', overwrite = 1)")
            cur.execute("DELETE FROM search_index")
            cur.execute("INSERT INTO search_index VALUES (?, ?, ?)", [count, newest, utc_now()])


def query_terms(query: str) -> list[str]:
    return [term for term in re.findall(r"\w+", query.lower()) if len(term) > 2]


def snippet(text: str, query: str, width: int = SNIPPET_CHARS) -> str:
    """About `width` characters of `text` around the first query term it contains."""
    flat = " ".join(text.split())
    lowered = flat.lower()
    positions = [pos for term in query_terms(query) if (pos := lowered.find(term)) >= 0]
    start = max(0, min(positions) - width // 4) if positions else 0
    if start > 0:
        space = flat.find(" ", start)
        start = space + 1 if 0 <= space < start + 30 else start
    end = min(len(flat), start + width)
    if end < len(flat):
        space = flat.rfind(" ", start, end)
        end = space if space > start + width // 2 else end
    prefix = "…" if start > 0 else ""
    suffix = "…" if end < len(flat) else ""
    return f"{prefix}{flat[start:end]}{suffix}"


class LocalSearch:
    """A Searcher over the evidence store (citeflow.search.Searcher)."""

    name = PROVIDER

    def __init__(self, store: EvidenceStore) -> None:
        self.store = store

    def search(self, query: str, limit: int) -> list[SearchResult]:
        if limit < 1 or not query.strip():
            return []
        # Holding the lock for the query too means no search reads the index while another
        # thread replaces it; a search takes milliseconds, so serialising them costs little.
        with self.store.index_lock, self.store.session():
            refresh_index(self.store)
            self.store.load_fts()
            with self.store.cursor() as cur:
                if cur.execute("SELECT count(*) FROM search_index WHERE pages > 0").fetchone() == (0,):
                    return []
                rows = cur.execute(SEARCH_SQL, {"query": query, "limit": limit}).fetchall()
        return [
            SearchResult(
                url=url,
                title=title,
                snippet=snippet(text, query),
                provider=PROVIDER,
                rank=rank,
                page_id=page_id,
            )
            for rank, (page_id, url, title, text) in enumerate(rows, start=1)
        ]
