"""BM25 search over the evidence store, on the real evaluation corpus."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import storage.search as search_module
from citeflow.contracts import Origin, PageInput
from citeflow.search import Searcher
from storage.ingest import ingest_paths
from storage.search import SNIPPET_CHARS, LocalSearch, index_is_stale, refresh_index, snippet
from storage.store import EvidenceStore


@pytest.fixture(scope="module")
def corpus(eval_dir: Path) -> Path:
    return eval_dir / "hotpotqa-100.corpus.jsonl"


@pytest.fixture(scope="module")
def corpus_records(corpus: Path) -> list[dict]:
    return [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def corpus_store(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EvidenceStore]:
    with EvidenceStore.open(tmp_path_factory.mktemp("corpus") / "corpus.duckdb") as store:
        ingest_paths(store, [corpus])
        yield store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EvidenceStore]:
    with EvidenceStore.open(tmp_path / "store.duckdb") as opened:
        yield opened


def test_local_search_is_a_searcher(store: EvidenceStore) -> None:
    assert isinstance(LocalSearch(store), Searcher)
    assert LocalSearch(store).name == "local"


def test_a_title_query_finds_its_page_first(corpus_store: EvidenceStore) -> None:
    results = LocalSearch(corpus_store).search("1932 Deep South tornado outbreak", 5)
    assert results[0].url == "https://en.wikipedia.org/wiki/1932_Deep_South_tornado_outbreak"
    assert results[0].title == "1932 Deep South tornado outbreak"
    assert [r.rank for r in results] == [1, 2, 3, 4, 5]
    assert {r.provider for r in results} == {"local"}
    page = corpus_store.get_page(results[0].page_id or "")
    assert page.url == results[0].url
    assert "1932" in results[0].snippet and len(results[0].snippet) <= SNIPPET_CHARS + 2


def test_titles_rank_their_own_page_first_across_the_corpus(
    corpus_store: EvidenceStore, corpus_records: list[dict]
) -> None:
    records = corpus_records
    sample = records[::10]
    search = LocalSearch(corpus_store)
    # A title shared by two records cannot single one out; count those as hits if either is first.
    urls_by_title: dict[str, set[str]] = {}
    for record in records:
        urls_by_title.setdefault(record["title"], set()).add(record["url"])
    hits = sum(
        1
        for record in sample
        if (results := search.search(record["title"], 3)) and results[0].url in urls_by_title[record["title"]]
    )
    assert hits / len(sample) >= 0.9, f"{hits} of {len(sample)} titles ranked first"


def test_queries_with_quotes_and_punctuation_are_safe(
    corpus_store: EvidenceStore, corpus_records: list[dict]
) -> None:
    search = LocalSearch(corpus_store)
    for query in [
        "O'Brien's \"band\"; DROP TABLE pages; --",
        "'); SELECT 1; --",
        "100% (rock) [album]?",
        "ü é ß",
    ]:
        results = search.search(query, 5)
        assert all(r.rank == i for i, r in enumerate(results, start=1))
    assert "Dandy Warhols" in search.search("Dandy Warhols; DROP TABLE pages", 1)[0].title
    assert corpus_store.query("SELECT count(*) FROM pages")[1] == [(len(corpus_records),)]


def test_limit_and_no_match(corpus_store: EvidenceStore) -> None:
    search = LocalSearch(corpus_store)
    assert len(search.search("album", 3)) == 3
    assert search.search("album", 0) == []
    assert search.search("   ", 5) == []
    assert search.search("zzqxv wwkjq", 5) == []


def test_bm25_is_usable_from_sql(corpus_store: EvidenceStore) -> None:
    columns, rows = corpus_store.query(
        "SELECT title FROM "
        "(SELECT title, fts_main_pages.match_bm25(id, 'tornado outbreak') AS score FROM pages) "
        "WHERE score IS NOT NULL ORDER BY score DESC LIMIT 3"
    )
    assert columns == ["title"]
    assert len(rows) == 3 and all("ornado" in title for (title,) in rows)


def test_an_empty_store_returns_nothing(store: EvidenceStore) -> None:
    assert LocalSearch(store).search("anything at all", 5) == []


def test_the_index_follows_new_pages_and_only_the_latest_version_is_found(store: EvidenceStore) -> None:
    search = LocalSearch(store)
    url = "https://example.org/volcano"
    old, _ = store.put_page(
        PageInput(url=url, title="Volcano", text="Mauna Loa erupts basalt.", origin=Origin.fetched)
    )
    assert [r.page_id for r in search.search("Mauna Loa", 5)] == [old.id]
    assert not index_is_stale(store)

    new, _ = store.put_page(
        PageInput(url=url, title="Volcano", text="Mauna Loa erupted again in 2022.", origin=Origin.fetched)
    )
    other, _ = store.put_page(
        PageInput(
            url="https://example.org/kilauea", title="Kilauea", text="Near Mauna Loa.", origin=Origin.fetched
        )
    )
    assert index_is_stale(store)
    ids = {r.page_id for r in search.search("Mauna Loa", 5)}
    assert ids == {new.id, other.id}
    assert old.id not in ids  # the older version of the same URL is never returned
    assert not index_is_stale(store)


def test_snippet_is_a_window_around_the_first_match() -> None:
    text = "filler " * 100 + "the Giant's Causeway has basalt columns " + "more " * 100
    cut = snippet(text, "causeway")
    assert "Causeway" in cut and cut.startswith("…") and cut.endswith("…")
    assert len(cut) <= SNIPPET_CHARS + 2
    assert snippet("Short text.", "absent") == "Short text."


def test_a_read_only_store_searches_the_index_it_has(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    with EvidenceStore.open(path) as writable:
        stored, _ = writable.put_page(
            PageInput(
                url="https://example.org/p", title="Pumice", text="Pumice floats.", origin=Origin.fetched
            )
        )
        LocalSearch(writable).search("pumice", 1)  # builds the index
        writable.put_page(
            PageInput(
                url="https://example.org/q", title="Pumice", text="Pumice sinks.", origin=Origin.fetched
            )
        )
    with EvidenceStore.open(path, read_only=True) as readable:
        assert index_is_stale(readable)
        assert [r.page_id for r in LocalSearch(readable).search("pumice", 5)] == [stored.id]


def test_threads_store_pages_and_search_at_the_same_time(tmp_path: Path) -> None:
    path = tmp_path / "shared.duckdb"
    failures: list[BaseException] = []
    with EvidenceStore.open(path) as shared:
        search = LocalSearch(shared)

        def work(worker: int) -> None:
            try:
                for n in range(10):
                    shared.put_page(
                        PageInput(
                            url=f"https://example.org/{worker}/{n}",
                            title=f"Lava {worker} {n}",
                            text=f"Lava flow number {n} from worker {worker}.",
                            origin=Origin.fetched,
                        )
                    )
                    search.search("lava flow", 5)
            except BaseException as error:  # collected and re-raised in the main thread below
                failures.append(error)

        workers = [threading.Thread(target=work, args=(n,)) for n in range(6)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
        assert not failures, failures
        assert len(search.search("lava flow", 100)) == 60


# The ranking fts's own match_bm25 macro gives, as the search used to compute it for every page.
MATCH_BM25_RANKING = """
SELECT id FROM (
    SELECT p.id, fts_main_pages.match_bm25(p.id, $query) AS overall,
           fts_main_pages.match_bm25(p.id, $query, fields := 'title') AS in_title
    FROM pages p
    QUALIFY row_number() OVER (PARTITION BY canonical_url ORDER BY stored_at DESC) = 1
)
WHERE overall IS NOT NULL
ORDER BY overall + 2.0 * coalesce(in_title, 0) DESC, id
LIMIT 10
"""
INDEX_CONTENT = """
SELECT d.name, t.fieldid, dict.term, dict.df, d.len, count(*) AS occurrences
FROM fts_main_pages.terms t
JOIN fts_main_pages.docs d USING (docid)
JOIN fts_main_pages.dict dict USING (termid)
GROUP BY ALL
"""


def _rows(store: EvidenceStore, sql: str, **params: object) -> list[tuple]:
    with store.session(), store.cursor() as cur:
        store.load_fts()  # fts's macros (match_bm25) need the extension
        return cur.execute(sql, params or None).fetchall()


def _ingest_in_batches(store: EvidenceStore, records: list[dict], batches: int) -> None:
    size = len(records) // batches + 1
    for start in range(0, len(records), size):
        store.put_pages(
            [PageInput(url=r["url"], title=r["title"], text=r["text"], origin=Origin.ingested)
             for r in records[start : start + size]]
        )  # fmt: skip
        refresh_index(store)


def test_an_index_grown_page_batch_by_batch_is_the_one_fts_builds_at_once(
    store: EvidenceStore, corpus_records: list[dict]
) -> None:
    _ingest_in_batches(store, corpus_records, batches=4)
    grown = sorted(_rows(store, INDEX_CONTENT))
    stats = _rows(store, "SELECT num_docs, avgdl FROM fts_main_pages.stats")
    with store.session(), store.cursor() as cur:
        store.load_fts()  # the extension loads when a session first needs it
        cur.execute("PRAGMA create_fts_index('pages', 'id', 'title', 'text', overwrite = 1)")
    assert grown == sorted(_rows(store, INDEX_CONTENT))
    assert stats == _rows(store, "SELECT num_docs, avgdl FROM fts_main_pages.stats")
    assert len(grown) > 10_000


def test_an_index_built_in_passes_of_a_few_pages_is_the_one_fts_builds_at_once(
    store: EvidenceStore, corpus_records: list[dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_module, "INDEX_BATCH_PAGES", 7)  # the refresh takes many passes
    _ingest_in_batches(store, corpus_records, batches=1)
    passes = _rows(store, INDEX_CONTENT)
    assert len({row[0] for row in passes}) == len(corpus_records) and not index_is_stale(store)
    with store.session(), store.cursor() as cur:
        store.load_fts()
        cur.execute("PRAGMA create_fts_index('pages', 'id', 'title', 'text', overwrite = 1)")
    assert sorted(passes) == sorted(_rows(store, INDEX_CONTENT))


def test_the_search_ranks_pages_as_fts_match_bm25_does(
    store: EvidenceStore, corpus_records: list[dict]
) -> None:
    _ingest_in_batches(store, corpus_records, batches=3)
    store.put_page(  # a second version of a page: only the latest may be found
        PageInput(url=corpus_records[0]["url"], title=corpus_records[0]["title"],
                  text=corpus_records[0]["text"] + " Revised.", origin=Origin.fetched)
    )  # fmt: skip
    refresh_index(store)
    search = LocalSearch(store)
    queries = [record["title"] for record in corpus_records[::40]] + [
        "album released 1998",
        "river of Europe",
    ]
    for query in queries:
        expected = [row[0] for row in _rows(store, MATCH_BM25_RANKING, query=query)]
        assert [result.page_id for result in search.search(query, 10)] == expected, query


def test_a_refresh_adds_only_the_new_pages(store: EvidenceStore) -> None:
    def page(n: int) -> PageInput:
        url, text = f"https://example.org/{n}", f"Basalt column {n} cools."
        return PageInput(url=url, title=f"Basalt {n}", text=text, origin=Origin.fetched)

    for n in range(3):
        store.put_page(page(n))
    refresh_index(store)
    before = _rows(store, "SELECT docid, name, len FROM fts_main_pages.docs ORDER BY docid")
    store.put_page(page(3))
    refresh_index(store)
    after = _rows(store, "SELECT docid, name, len FROM fts_main_pages.docs ORDER BY docid")
    assert after[:3] == before and len(after) == 4
    assert _rows(store, "SELECT df FROM fts_main_pages.dict WHERE term = 'basalt'") == [(4,)]
    assert _rows(store, "SELECT num_docs FROM fts_main_pages.stats") == [(4,)]


def test_compaction_orders_the_terms_and_changes_no_result(
    store: EvidenceStore, corpus_records: list[dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_module, "COMPACT_MIN_PAGES", 50)
    _ingest_in_batches(store, corpus_records[:300], batches=1)  # one batch: appended in term order
    assert _rows(store, "SELECT docs FROM fts_main_pages.compacted") == [(300,)]
    _ingest_in_batches(store, corpus_records[300:330], batches=1)  # 30 new pages: below the threshold
    assert _rows(store, "SELECT docs FROM fts_main_pages.compacted") == [(300,)]
    before = [(r.page_id, r.rank) for r in LocalSearch(store).search("film director", 10)]
    with store.cursor() as cur:  # the same pages, compacted: the ranking may not change
        cur.execute("UPDATE fts_main_pages.compacted SET docs = 1")
        cur.execute("DELETE FROM search_index")  # so the next search refreshes, and compacts
    monkeypatch.setattr(search_module, "COMPACT_MIN_PAGES", 10)
    assert [(r.page_id, r.rank) for r in LocalSearch(store).search("film director", 10)] == before
    assert _rows(store, "SELECT docs FROM fts_main_pages.compacted") == [(330,)]
    termids = [row[0] for row in _rows(store, "SELECT termid FROM fts_main_pages.terms")]
    assert termids == sorted(termids)


def test_an_index_built_by_fts_itself_is_rebuilt_in_the_new_layout(store: EvidenceStore) -> None:
    stored, _ = store.put_page(
        PageInput(url="https://example.org/obsidian", title="Obsidian", text="Obsidian is volcanic glass.",
                  origin=Origin.fetched)
    )  # fmt: skip
    with store.session(), store.cursor() as cur:  # as a store indexed by an earlier citeflow holds it
        store.load_fts()
        cur.execute("PRAGMA create_fts_index('pages', 'id', 'title', 'text', overwrite = 1)")
        cur.execute("INSERT INTO search_index VALUES (0, NULL, now())")
    assert [r.page_id for r in LocalSearch(store).search("volcanic glass", 5)] == [stored.id]
    assert _rows(store, "SELECT docs FROM fts_main_pages.compacted") == [(1,)]
