"""Local search: BM25 over the pages in the evidence store, with an index that grows as pages are added.

DuckDB's fts extension was chosen over an in-memory library such as bm25s because the index lives
in the same file as the evidence: nothing to rebuild at start-up, nothing to keep in step with a
second file, and users can rank pages from SQL with fts_main_pages.match_bm25. The extension binary
comes from the duckdb-extension-fts wheel, so no network is needed (storage/files.py loads it).

fts itself can only build an index from every page at once (`PRAGMA create_fts_index`), which took
7.9 s at 20,000 pages and grows with the store, after every ingest and every fetched page. So fts only
creates the index's tables and macros, once, over no pages; citeflow fills them, in fts's own layout
(schema fts_main_pages: one `terms` row per token occurrence, `dict` with each term's document frequency,
`docs` with each page's length, `stats`), adding only the pages the index does not hold yet: the same
tokenizer, stopwords and Porter stemmer, so the tables are identical to those a full build makes
(tests/test_local_search.py checks it) and fts's match_bm25 macro reads them unchanged.

A search reads only the `terms` rows of its query's terms. Rows are appended sorted by term, so that
DuckDB can skip the row groups holding other terms; pages added in small batches leave a tail of rows in
no useful order, which every search scans, so once that tail holds more than COMPACT_SHARE of the pages,
the refresh rewrites `terms` in term order (seconds at 100,000 pages, once per 10% of growth).

On a DuckLake store (storage/lake.py) the lake keeps no macros, so each process builds its own index
in its in-memory database, over a view of the lake's `pages`, and refreshes it the same way when the
lake's pages change (a new snapshot adds pages: the count or newest stored_at moves).

The `search_index` table records the page count and newest stored_at the index was brought up to;
a search first compares them with `pages` and adds what is new. Only the latest version of each
canonical URL is returned.
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
INDEX = "fts_main_pages"  # the schema fts names for an index on main.pages
TITLE_FIELD = 0  # fts numbers the indexed columns in the order given: title, then text
STEMMER = "porter"
K1, B = 1.2, 0.75  # match_bm25's defaults
# Rewrite `terms` in term order once the pages added since the last rewrite pass this share of all
# pages and COMPACT_MIN_PAGES: below that a search scans the tail in a few milliseconds.
COMPACT_SHARE = 0.10
COMPACT_MIN_PAGES = 5_000
# Pages indexed per pass: the temporary tables of a pass hold every word of its pages, so one pass over
# a 50,000-page ingest took the process to 1.7 GB; passes of 5,000 held about 140 MB of them, and with
# this many the refresh of 454,297 pages peaked at 312 MB (128 MB limit; 425 MB at 5,000 and 192 MB).
INDEX_BATCH_PAGES = 2_500

# What fts's PRAGMA does for (a batch of) the pages not yet indexed, as a few set operations: choose the
# batch by id and date alone, then read its pages (numbering every unindexed page's text with a window
# held all of it in memory: 1 GB of new pages ran out of a 256 MB limit), tokenize each
# title and text with fts's own `tokenize` macro, stem each distinct word once (not each of its
# occurrences) and drop stopwords there, give new terms the next term ids, append one `terms` row per
# occurrence sorted by term, then add to each term's document frequency and each new page's length.
# Last, the older versions of the URLs just added are listed in `superseded` (citeflow's table, not
# fts's): a search then skips them without comparing every page's URL and date each time.
ADD_PAGES_SQL = f"""
CREATE OR REPLACE TEMP TABLE index_new_docs AS
WITH chosen AS (
    SELECT p.id FROM pages p ANTI JOIN {INDEX}.docs d ON d.name = p.id
    ORDER BY p.stored_at, p.id
    LIMIT {INDEX_BATCH_PAGES}
)
SELECT (SELECT coalesce(max(docid), -1) FROM {INDEX}.docs)
           + row_number() OVER (ORDER BY p.stored_at, p.id) AS docid,
       p.id AS name, p.canonical_url, p.title, p.text
FROM pages p SEMI JOIN chosen c ON c.id = p.id;

CREATE OR REPLACE TEMP TABLE index_new_words AS
SELECT docid, {TITLE_FIELD} AS fieldid, unnest({INDEX}.tokenize(title)) AS w FROM index_new_docs
UNION ALL
SELECT docid, {TITLE_FIELD + 1} AS fieldid, unnest({INDEX}.tokenize(text)) AS w FROM index_new_docs;

CREATE OR REPLACE TEMP TABLE index_new_stems AS
SELECT w, stem(w, '{STEMMER}') AS term FROM (SELECT DISTINCT w FROM index_new_words)
WHERE len(w) > 0 AND w NOT IN (SELECT sw FROM {INDEX}.stopwords);

INSERT INTO {INDEX}.dict
SELECT (SELECT coalesce(max(termid), -1) FROM {INDEX}.dict) + row_number() OVER (ORDER BY term), term, 0
FROM (SELECT DISTINCT term FROM index_new_stems) ANTI JOIN {INDEX}.dict USING (term);

CREATE OR REPLACE TEMP TABLE index_new_terms AS
SELECT w.docid, w.fieldid, s.termid
FROM index_new_words w
JOIN (SELECT w, termid FROM index_new_stems JOIN {INDEX}.dict USING (term)) s USING (w)
ORDER BY s.termid, w.docid;

INSERT INTO {INDEX}.terms SELECT docid, fieldid, termid FROM index_new_terms;

UPDATE {INDEX}.dict SET df = dict.df + added.docs
FROM (SELECT termid, count(*) AS docs FROM (SELECT DISTINCT termid, docid FROM index_new_terms)
      GROUP BY termid) added
WHERE dict.termid = added.termid;

INSERT INTO {INDEX}.docs
SELECT n.docid, n.name, coalesce(l.len, 0)
FROM index_new_docs n LEFT JOIN (SELECT docid, count(*) AS len FROM index_new_terms GROUP BY docid) l
  USING (docid);

INSERT INTO {INDEX}.superseded
SELECT docid FROM (
    SELECT d.docid
    FROM pages p JOIN {INDEX}.docs d ON d.name = p.id
    WHERE p.canonical_url IN (SELECT canonical_url FROM index_new_docs)
    QUALIFY row_number() OVER (PARTITION BY p.canonical_url ORDER BY p.stored_at DESC) > 1
) ANTI JOIN {INDEX}.superseded USING (docid);

DELETE FROM {INDEX}.stats;
INSERT INTO {INDEX}.stats SELECT count(docid), sum(len) / count(len) FROM {INDEX}.docs;

DROP TABLE index_new_docs;
DROP TABLE index_new_words;
DROP TABLE index_new_stems;
DROP TABLE index_new_terms;
"""

COMPACT_SQL = f"""
CREATE TABLE {INDEX}.terms_by_term AS SELECT * FROM {INDEX}.terms ORDER BY termid, docid;
DROP TABLE {INDEX}.terms;
ALTER TABLE {INDEX}.terms_by_term RENAME TO terms;
UPDATE {INDEX}.compacted SET docs = (SELECT count(*) FROM {INDEX}.docs);
"""

# match_bm25's formula, computed once for every page holding a query term rather than once per page
# of the store, over all fields and over the title alone, as the two calls of match_bm25 would; pages
# with a newer version are left out. The text of the pages returned is read afterwards.
SEARCH_SQL = f"""
WITH query_terms AS (
    SELECT dict.termid, dict.df
    FROM {INDEX}.dict AS dict
    JOIN (SELECT DISTINCT stem(unnest({INDEX}.tokenize($query)), '{STEMMER}') AS term) USING (term)
),
frequencies AS (
    SELECT docid, termid, count(*) AS tf, count(*) FILTER (WHERE fieldid = {TITLE_FIELD}) AS title_tf
    FROM {INDEX}.terms
    WHERE termid IN (SELECT termid FROM query_terms)
    GROUP BY docid, termid
),
weighted AS (
    SELECT d.name, f.tf, f.title_tf,
           log((stats.num_docs - q.df + 0.5) / (q.df + 0.5) + 1) AS idf,
           {K1} * (1 - {B} + {B} * d.len / stats.avgdl) AS norm
    FROM frequencies f
    ANTI JOIN {INDEX}.superseded USING (docid)
    JOIN query_terms q USING (termid)
    JOIN {INDEX}.docs d USING (docid), {INDEX}.stats AS stats
)
SELECT name
FROM weighted
GROUP BY name
ORDER BY sum(idf * tf * ({K1} + 1) / (tf + norm))
           + {TITLE_WEIGHT} * sum(idf * title_tf * ({K1} + 1) / (title_tf + norm)) DESC,
         name
LIMIT $limit
"""


def _pages_state(cur: duckdb.DuckDBPyConnection) -> tuple[int, datetime | None]:
    """What an index brought up to date now would cover: the page count and the newest stored_at."""
    count, newest = cur.execute("SELECT count(*), max(stored_at) FROM pages").fetchone()  # type: ignore[misc]
    return count, newest


def index_state(store: EvidenceStore) -> tuple[int, str | None]:
    """The state of `pages` an index built now would cover, as plain values (for cache keys)."""
    with store.cursor() as cur:
        count, newest = _pages_state(cur)
    return count, newest.isoformat() if newest else None


def _index_exists(cur: duckdb.DuckDBPyConnection) -> bool:
    (tables,) = cur.execute(  # type: ignore[misc]
        "SELECT count(*) FROM duckdb_tables() WHERE schema_name = ? AND table_name = 'compacted'", [INDEX]
    ).fetchone()
    return tables > 0


def index_is_stale(store: EvidenceStore) -> bool:
    with store.index_cursor() as cur:
        built = cur.execute("SELECT pages, max_stored_at FROM search_index").fetchone()
        return built is None or not _index_exists(cur) or tuple(built) != _pages_state(cur)


def _create_empty_index(cur: duckdb.DuckDBPyConnection) -> None:
    """fts's index tables and macros, holding no page, and citeflow's `compacted` and `superseded`.

    fts builds them only from a table's every row and names them after the table, so its PRAGMA is run
    on an empty stand-in named `pages` while the real table is renamed aside, all in the caller's
    transaction: a rename is a catalog change, instant whatever the table holds."""
    cur.execute(f"DROP SCHEMA IF EXISTS {INDEX} CASCADE")
    view = cur.execute(
        "SELECT sql FROM duckdb_views() WHERE view_name = 'pages' AND database_name = current_database()"
    ).fetchone()
    if view:  # on a lake, `pages` is this process's view of the lake's table (EvidenceStore.index_cursor)
        cur.execute("DROP VIEW pages")
    else:
        cur.execute("ALTER TABLE pages RENAME TO pages_being_indexed")
    cur.execute("CREATE TABLE pages (id VARCHAR, title VARCHAR, text VARCHAR)")
    cur.execute(f"PRAGMA create_fts_index('pages', 'id', 'title', 'text', stemmer = '{STEMMER}')")
    cur.execute("DROP TABLE pages")
    cur.execute(view[0] if view else "ALTER TABLE pages_being_indexed RENAME TO pages")
    cur.execute(f"CREATE TABLE {INDEX}.compacted (docs BIGINT NOT NULL)")
    cur.execute(f"INSERT INTO {INDEX}.compacted VALUES (0)")
    cur.execute(f"CREATE TABLE {INDEX}.superseded (docid BIGINT NOT NULL)")


def _indexed_count(cur: duckdb.DuckDBPyConnection) -> int:
    return cur.execute(f"SELECT count(*) FROM {INDEX}.docs").fetchone()[0]  # type: ignore[index]


def _index_matches_pages(cur: duckdb.DuckDBPyConnection) -> bool:
    """False when the index names a page the store no longer holds: then only a rebuild is right."""
    (orphans,) = cur.execute(  # type: ignore[misc]
        f"SELECT count(*) FROM {INDEX}.docs d ANTI JOIN pages p ON p.id = d.name"
    ).fetchone()
    return orphans == 0


def _compact_if_due(cur: duckdb.DuckDBPyConnection) -> None:
    docs, compacted = cur.execute(  # type: ignore[misc]
        f"SELECT (SELECT count(*) FROM {INDEX}.docs), docs FROM {INDEX}.compacted"
    ).fetchone()
    if compacted == 0 and docs > 0:  # the first pages were appended in term order into an empty table
        cur.execute(f"UPDATE {INDEX}.compacted SET docs = ?", [docs])
    elif docs - compacted > max(COMPACT_SHARE * docs, COMPACT_MIN_PAGES):
        cur.execute(COMPACT_SQL)


def refresh_index(store: EvidenceStore) -> None:
    """Bring the full-text index up to date with `pages`: add the pages it does not hold yet.

    The first refresh of a store creates the index; a store whose index names pages it no longer holds
    gets it rebuilt. An empty store gets an empty index, and a search of it finds nothing.
    """
    if store.read_only:
        return  # a read-only store searches the index as it was last brought up to date
    with store.index_lock:
        with store.session():
            if not index_is_stale(store):
                return
            store.load_fts()
            with store.index_transaction() as cur:
                if not _index_exists(cur) or not _index_matches_pages(cur):
                    _create_empty_index(cur)
        # A transaction a batch, so what DuckDB holds for one stays bounded; a refresh stopped part way is
        # taken up by the next, since search_index still records the index as stale. And a session a batch
        # (when no caller holds one open): DuckDB keeps every row group it appends in memory while the file
        # is open, outside its memory limit, so 454,297 pages indexed in one session grew the process by
        # about 220 MB (27,800 `terms` row groups); reopened, it stays flat.
        added = INDEX_BATCH_PAGES
        while added == INDEX_BATCH_PAGES:
            with store.session():
                store.load_fts()
                with store.index_transaction() as cur:
                    indexed = _indexed_count(cur)
                    cur.execute(ADD_PAGES_SQL)
                    added = _indexed_count(cur) - indexed
        with store.session(), store.index_transaction() as cur:
            _compact_if_due(cur)
            count, newest = _pages_state(cur)
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
        # thread adds to it; a search takes milliseconds, so serialising them costs little.
        with self.store.index_lock, self.store.session():
            refresh_index(self.store)
            self.store.load_fts()
            with self.store.index_cursor() as cur:
                if not _index_exists(cur):
                    return []  # a read-only store that was never searched while writable
                ranked = [
                    row[0] for row in cur.execute(SEARCH_SQL, {"query": query, "limit": limit}).fetchall()
                ]
                pages = {
                    row[0]: row[1:]
                    for row in cur.execute(
                        "SELECT id, url, title, text FROM pages WHERE id IN (SELECT unnest(?))", [ranked]
                    ).fetchall()
                }
        return [
            SearchResult(
                url=pages[page_id][0],
                title=pages[page_id][1],
                snippet=snippet(pages[page_id][2], query),
                provider=PROVIDER,
                rank=rank,
                page_id=page_id,
            )
            for rank, page_id in enumerate(ranked, start=1)
        ]
