"""The evidence store on real DuckDB files: pages, runs, claims, user SQL, threads."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from citeflow.contracts import (
    Claim,
    ClaimStatus,
    ModelCall,
    Origin,
    Outcome,
    PageInput,
    ReportSentence,
    RunError,
    RunMetrics,
    RunSource,
    RunStatus,
    SearchResult,
    SentenceStatus,
    StageMetrics,
    SubQuestion,
    Trace,
)
from citeflow.errors import InputError, StoreError
from storage import pages as pages_module
from storage import store as store_module
from storage.search import refresh_index
from storage.store import EvidenceStore, close_stores, content_hash, get_store, read_only_query


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EvidenceStore]:
    with EvidenceStore.open(tmp_path / "store.duckdb") as opened:
        yield opened


def page(url: str = "https://example.org/a", text: str = "Alpha text about tornadoes.") -> PageInput:
    return PageInput(url=url, title="A", text=text, origin=Origin.fetched)


def claim(number: int, page_id: str, status: ClaimStatus, subquestion: str = "q1") -> Claim:
    return Claim(
        id=f"C{number}",
        subquestion_id=subquestion,
        page_id=page_id,
        page_hash="h",
        text=f"claim {number}",
        quote=f"quote {number}",
        status=status,
        reason="" if status is ClaimStatus.verified else "quote not found in page",
    )


def count(store: EvidenceStore, table: str) -> int:
    with store.cursor() as cur:
        row = cur.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


# -- pages -------------------------------------------------------------------------------------


def test_same_url_and_content_is_stored_once(store: EvidenceStore) -> None:
    first, created = store.put_page(page("https://Example.org/a?utm_source=x#top"))
    again, created_again = store.put_page(page("https://example.org/a"))
    assert created and not created_again
    assert again == first
    assert first.canonical_url == "https://example.org/a"
    assert first.content_hash == content_hash("Alpha text about tornadoes.")
    assert len(first.id) == 16
    assert count(store, "pages") == 1


def test_changed_content_is_a_new_version_and_the_latest(store: EvidenceStore) -> None:
    old, _ = store.put_page(page(text="Version one."))
    new, created = store.put_page(page(text="Version two."))
    assert created and new.id != old.id
    assert new.stored_at > old.stored_at
    assert store.latest_page("https://example.org/a#frag") == new
    assert store.get_page(old.id).text == "Version one."
    assert store.latest_page("https://example.org/other") is None


def test_max_chars_cuts_text_before_hashing(store: EvidenceStore) -> None:
    stored, _ = store.put_page(page(text="x" * 50), max_chars=10)
    assert stored.text == "x" * 10
    assert stored.content_hash == content_hash("x" * 10)


def test_put_pages_counts_new_unchanged_changed(store: EvidenceStore) -> None:
    store.put_page(page("https://example.org/a", "old"))
    counts = store.put_pages(
        [
            page("https://example.org/a", "old"),
            page("https://example.org/a", "new"),
            page("https://example.org/b", "b"),
            page("https://example.org/b", "b"),
        ]
    )
    assert (counts.new, counts.unchanged, counts.changed) == (1, 2, 1)
    assert count(store, "pages") == 3


def test_put_pages_is_all_or_nothing(store: EvidenceStore, monkeypatch: pytest.MonkeyPatch) -> None:
    real = pages_module.put
    inserted: list[int] = []

    def insert_then_fail(
        cur: duckdb.DuckDBPyConnection, pages: list[PageInput], max_chars: int | None
    ) -> list:
        real(cur, pages, max_chars)
        inserted.append(cur.execute("SELECT count(*) FROM pages").fetchone()[0])  # type: ignore[index]
        raise duckdb.IOException("simulated failure after the rows were written")

    monkeypatch.setattr(pages_module, "put", insert_then_fail)
    with pytest.raises(StoreError, match="could not be read or written: simulated failure.*rolled back"):
        store.put_pages([page(f"https://example.org/{n}", f"text {n}") for n in range(5)])
    assert inserted == [5]  # the rows really were in the transaction before it failed
    assert count(store, "pages") == 0


def test_a_row_the_database_refuses_stores_none_of_the_batch(
    store: EvidenceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = pages_module.json_batch

    def last_without_origin(pages: list) -> str:
        rows = json.loads(real(pages))
        rows[-1]["origin"] = None  # violates NOT NULL on the last row of the batch
        return json.dumps(rows)

    monkeypatch.setattr(pages_module, "json_batch", last_without_origin)
    with pytest.raises(duckdb.ConstraintException):
        store.put_pages([page(f"https://example.org/{n}", f"text {n}") for n in range(5)])
    assert count(store, "pages") == 0


def test_get_page_of_unknown_id_is_a_store_error(store: EvidenceStore) -> None:
    with pytest.raises(StoreError, match="not in the store"):
        store.get_page("0000000000000000")


# -- opening -----------------------------------------------------------------------------------


def test_a_file_that_is_not_duckdb_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.duckdb"
    content = b"these are my notes, not a database\n" * 20
    path.write_bytes(content)
    before = path.stat().st_mtime_ns
    with pytest.raises(StoreError, match="not a DuckDB database") as raised:
        EvidenceStore.open(path)
    assert "untouched" in str(raised.value)
    assert path.read_bytes() == content
    assert path.stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.duckdb"]


def test_read_only_open_of_a_missing_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "missing.duckdb"
    with pytest.raises(StoreError, match="does not exist"):
        EvidenceStore.open(path, read_only=True)
    assert not path.exists()


def test_closed_store_refuses_use(tmp_path: Path) -> None:
    opened = EvidenceStore.open(tmp_path / "store.duckdb")
    opened.close()
    with pytest.raises(StoreError, match="closed"):
        opened.latest_page("https://example.org/a")


# -- runs, claims, sources ---------------------------------------------------------------------


def test_a_run_from_start_to_finish(store: EvidenceStore) -> None:
    run = "run-1"
    store.start_run(run, "Why tornadoes?", "extractive", "local", '{"caps": {}}')
    store.add_subquestions(
        run,
        [
            SubQuestion(id="q2", position=1, text="Second?", query="second"),
            SubQuestion(id="q1", position=0, text="First?", query="first"),
        ],
    )
    assert [sq.id for sq in store.subquestions(run)] == ["q1", "q2"]
    pa, _ = store.put_page(page("https://example.org/a", "page a"))
    pb, _ = store.put_page(page("https://example.org/b", "page b"))
    pc, _ = store.put_page(page("https://example.org/c", "page c"))
    # b is read first for q1 but only c and a have verified claims; a is read for q2 only.
    store.add_research(
        run,
        "q2",
        [],
        [RunSource(run_id=run, subquestion_id="q2", page_id=pa.id, provider="local", rank=1)],
        [],
    )
    store.add_research(
        run,
        "q1",
        [SearchResult(url=pa.url, title="A", snippet="s", provider="local", rank=1, page_id=pa.id)],
        [
            RunSource(run_id=run, subquestion_id="q1", page_id=pb.id, provider="local", rank=1),
            RunSource(run_id=run, subquestion_id="q1", page_id=pc.id, provider="local", rank=2),
        ],
        [],
    )
    store.add_claims(
        run,
        [claim(n, pa.id, ClaimStatus.verified, "q2") for n in (1, 10)]
        + [claim(2, pb.id, ClaimStatus.rejected), claim(3, pc.id, ClaimStatus.verified)],
    )
    assert [c.id for c in store.claims(run)] == ["C1", "C2", "C3", "C10"]
    assert [c.id for c in store.claims(run, ClaimStatus.rejected)] == ["C2"]

    sources = store.number_sources(run)
    assert [(s.id, s.page_id) for s in sources] == [("S1", pc.id), ("S2", pa.id)]
    assert sources[0].url == "https://example.org/c" and sources[0].stored_at.tzinfo is not None
    by_claim = {c.id: c.source_id for c in store.claims(run)}
    assert by_claim == {"C1": "S2", "C2": None, "C3": "S1", "C10": "S2"}
    assert {(rs.page_id, rs.source_id) for rs in store.run_sources(run)} == {
        (pa.id, "S2"),
        (pb.id, None),
        (pc.id, "S1"),
    }
    assert [s.id for s in store.number_sources(run)] == ["S1", "S2"]  # renumbering is stable
    # The report numbers sources by first citation: claims and run_sources follow it (S1 <-> S2 swap).
    store.renumber_sources(run, {"S1": "S2", "S2": "S1"})
    assert {c.id: c.source_id for c in store.claims(run)} == {"C1": "S1", "C2": None, "C3": "S2", "C10": "S1"}
    assert {(rs.page_id, rs.source_id) for rs in store.run_sources(run)} == {
        (pa.id, "S1"),
        (pb.id, None),
        (pc.id, "S2"),
    }
    store.renumber_sources(run, {"S1": "S2", "S2": "S1"})

    store.add_report_sentences(
        [
            ReportSentence(
                run_id=run,
                position=0,
                section="",
                text="Fact [S1].",
                cites=["S1"],
                status=SentenceStatus.kept,
            )
        ]
    )
    for tokens in (100, 50):
        store.add_model_call(
            ModelCall(
                run_id=run,
                role="planner",
                model="m",
                endpoint="http://127.0.0.1:1/v1",
                prompt_tokens=tokens,
                completion_tokens=tokens // 10,
                tokens_estimated=False,
                latency_seconds=0.1,
                attempt=1,
                outcome=Outcome.ok,
                prompt_hash="p",
            )
        )
    assert store.run_tokens(run) == (150, 15)
    usage = store.role_usage(run)
    assert list(usage) == ["planner"]
    assert (usage["planner"].calls, usage["planner"].prompt_tokens, usage["planner"].completion_tokens) == (
        2,
        150,
        15,
    )
    assert store.role_usage("other") == {}
    assert store.run_tokens("other") == (0, 0)
    now = datetime.now(UTC)
    store.add_trace(
        Trace(run_id=run, stage="plan", actor="extractive", started_at=now, ended_at=now, outcome=Outcome.ok)
    )
    store.add_error(RunError(run_id=run, stage="research", detail="search failed", subquestion_id="q2"))
    assert store.errors(run) == [
        RunError(run_id=run, stage="research", detail="search failed", subquestion_id="q2")
    ]

    store.finish_run(run, RunStatus.complete, "# Report", "reports/run-1.md", RunMetrics(wall_seconds=2.5))
    with store.cursor() as cur:
        row = cur.execute(
            "SELECT status, wall_seconds, report_path, metrics->>'$.wall_seconds', ended_at >= started_at "
            "FROM runs WHERE run_id = ?",
            [run],
        ).fetchone()
        cites = cur.execute("SELECT cites FROM report_sentences").fetchone()
        trace = cur.execute("SELECT stage, actor, outcome, started_at = ended_at FROM traces").fetchall()
    assert row == ("complete", 2.5, "reports/run-1.md", "2.5", True)
    assert cites == (["S1"],)
    assert trace == [("plan", "extractive", "ok", True)]


def test_finishing_an_unknown_run_is_a_store_error(store: EvidenceStore) -> None:
    with pytest.raises(StoreError, match="never started"):
        store.finish_run("nope", RunStatus.failed, "", None, RunMetrics())


# -- user SQL ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM pages",
        "INSERT INTO pages (id) VALUES ('x')",
        "UPDATE pages SET title = 'x'",
        "DROP TABLE pages",
        "CREATE TABLE t (a INTEGER)",
        "ALTER TABLE pages ADD COLUMN x INTEGER",
        "COPY pages TO 'out.csv'",
        "ATTACH 'other.duckdb'",
        "INSTALL fts",
        "LOAD fts",
        "SET threads = 1",
        "PRAGMA create_fts_index('pages', 'id', 'text', overwrite = 1)",
        "EXPLAIN ANALYZE DELETE FROM pages",
        "SELECT 1; DELETE FROM pages",
        "SELECT 1; SELECT 2",
        "   ",
    ],
)
def test_sql_that_could_write_is_refused_and_the_store_unchanged(store: EvidenceStore, sql: str) -> None:
    store.put_page(page())
    with pytest.raises(InputError) as raised:
        store.query(sql)
    assert "unchanged" in str(raised.value)
    assert count(store, "pages") == 1
    assert [r[0] for r in store.query("SELECT title FROM pages")[1]] == ["A"]


def test_sql_select_returns_columns_and_rows(store: EvidenceStore) -> None:
    store.put_page(page())
    columns, rows = store.query("SELECT url, length(text) AS n FROM pages")
    assert columns == ["url", "n"]
    assert rows == [("https://example.org/a", len("Alpha text about tornadoes."))]
    with pytest.raises(InputError, match="failed"):
        store.query("SELECT no_such_column FROM pages")


def test_read_only_query_uses_its_own_connection(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    with EvidenceStore.open(path) as opened:
        opened.put_page(page())
    assert read_only_query(path, "SELECT count(*) AS n FROM pages") == (["n"], [(1,)])
    with pytest.raises(InputError):
        read_only_query(path, "DELETE FROM pages")
    outside = tmp_path / "outside.csv"
    outside.write_text("a,b\n1,2\n")
    with pytest.raises(
        InputError, match="file system operations are disabled"
    ):  # no file access from user SQL
        read_only_query(path, f"SELECT * FROM read_csv('{outside}')")
    with pytest.raises(StoreError, match="does not exist"):
        read_only_query(tmp_path / "missing.duckdb", "SELECT 1")
    assert read_only_query(path, "SELECT count(*) FROM pages")[1] == [(1,)]
    try:
        with get_store(path).session():  # held read-write by this process: the query joins that connection
            with pytest.raises(InputError, match="file system operations are disabled"):
                read_only_query(path, f"SELECT * FROM read_csv('{outside}')")
            assert read_only_query(path, "SELECT count(*) FROM pages")[1] == [(1,)]
    finally:
        close_stores()


# -- one store per process, shared by threads ---------------------------------------------------


def test_threads_share_one_store_and_append_claims_concurrently(tmp_path: Path) -> None:
    path = tmp_path / "shared.duckdb"
    threads_n, per_thread = 8, 40
    seen: list[EvidenceStore] = []
    failures: list[BaseException] = []
    start = threading.Barrier(threads_n)

    def work(worker: int) -> None:
        try:
            start.wait()
            shared = get_store(path)
            seen.append(shared)
            stored, _ = shared.put_page(page(f"https://example.org/{worker % 3}", f"text {worker % 3}"))
            for n in range(per_thread):
                shared.add_claims("run", [claim(worker * 1000 + n, stored.id, ClaimStatus.verified)])
                shared.add_trace(
                    Trace(
                        run_id="run",
                        stage="verify",
                        actor="t",
                        started_at=datetime.now(UTC),
                        ended_at=datetime.now(UTC),
                        outcome=Outcome.ok,
                    )
                )
        except BaseException as error:  # collected and re-raised in the main thread below
            failures.append(error)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads_n)]
    began = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    try:
        assert not failures, failures
        assert len({id(s) for s in seen}) == 1
        shared = get_store(path)
        assert len(shared.claims("run")) == threads_n * per_thread
        assert count(shared, "traces") == threads_n * per_thread
        assert count(shared, "pages") == 3
        assert time.perf_counter() - began < 60
    finally:
        close_stores()
    assert seen[0].closed
    assert not seen[0].file_is_open  # the last thread to leave released the file
    with pytest.raises(StoreError, match="closed"):
        seen[0].page_count()
    assert get_store(path) is not seen[0]  # a closed store is replaced, not handed out
    close_stores()
    assert store_module._stores == {}


# -- the recipes in storage/SCHEMA.md ----------------------------------------------------------

SCHEMA_GUIDE = Path(__file__).resolve().parent.parent / "storage" / "SCHEMA.md"


def test_every_recipe_in_the_schema_guide_runs_and_finds_rows(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    run = "run-recipes"
    with EvidenceStore.open(path) as opened:
        old, _ = opened.put_page(page("https://example.org/basalt", "Basalt columns, first draft."))
        basalt, _ = opened.put_page(page("https://example.org/basalt", "Basalt columns form as lava cools."))
        opened.start_run(run, "How do basalt columns form?", "extractive", "local", "{}")
        opened.add_subquestions(run, [SubQuestion(id="q1", position=0, text="How?", query="basalt columns")])
        opened.add_research(
            run,
            "q1",
            [],
            [RunSource(run_id=run, subquestion_id="q1", page_id=basalt.id, provider="local", rank=1)],
            [],
        )
        opened.add_claims(
            run, [claim(1, basalt.id, ClaimStatus.verified), claim(2, old.id, ClaimStatus.rejected)]
        )
        opened.number_sources(run)
        opened.add_report_sentences(
            [
                ReportSentence(
                    run_id=run,
                    position=0,
                    section="q1",
                    text="It cools [S1].",
                    cites=["S1"],
                    status=SentenceStatus.kept,
                ),
                ReportSentence(
                    run_id=run,
                    position=1,
                    section="q1",
                    text="It is hot.",
                    cites=[],
                    status=SentenceStatus.removed,
                    reason="uncited",
                ),
            ]
        )
        opened.add_model_call(
            ModelCall(
                run_id=run,
                role="planner",
                model="m",
                endpoint="http://127.0.0.1:1/v1",
                prompt_tokens=10,
                completion_tokens=5,
                tokens_estimated=True,
                latency_seconds=0.2,
                attempt=1,
                outcome=Outcome.ok,
                prompt_hash="p",
            )
        )
        now = datetime.now(UTC)
        opened.add_trace(
            Trace(
                run_id=run,
                stage="research",
                actor="local",
                started_at=now,
                ended_at=now,
                outcome=Outcome.degraded,
            )
        )
        metrics = RunMetrics(stages=[StageMetrics(stage="plan", wall_seconds=0.5)], wall_seconds=1.0)
        opened.finish_run(run, RunStatus.complete, "# Report", None, metrics)
        refresh_index(opened)

    recipes = re.findall(
        r'^citeflow sql "(.+)"$', SCHEMA_GUIDE.read_text(encoding="utf-8"), flags=re.MULTILINE
    )
    assert len(recipes) >= 10
    for recipe in recipes:
        columns, rows = read_only_query(path, recipe.replace("RUN_ID", run))
        assert columns and rows, recipe


def test_duckdb_running_out_of_memory_is_one_store_error_and_stores_nothing(store: EvidenceStore) -> None:
    with store.session():
        with store.cursor() as cur:
            cur.execute("SET memory_limit = '8MB'")  # for this open of the file only
        with pytest.raises(StoreError, match="ran out of memory: failed to allocate") as raised:
            store.put_pages(
                [page(f"https://example.org/{n}", f"{n} " + "lava " * 400_000) for n in range(10)]
            )
    assert str(raised.value).endswith("(this step was rolled back; everything stored before it is intact)")
    assert "\n" not in str(raised.value)
    assert store.page_count() == 0
