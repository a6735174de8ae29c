"""Ingesting local files: parse everything first, write once, lose nothing on bad input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from citeflow.config import Caps
from citeflow.contracts import Origin, PageInput
from citeflow.errors import IngestError
from citeflow.web.extract import TITLE_MAX_CHARS
from storage.ingest import PAGE_TEXT_MAX_CHARS, ingest_paths
from storage.pages import IngestCounts
from storage.search import LocalSearch
from storage.store import EvidenceStore

ARTICLE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Basalt columns - Geology Notes</title>
<meta name="date" content="2021-06-15"></head>
<body><nav>Home | About</nav>
<article><h1>Basalt columns</h1>
<p>Columnar basalt forms when a thick lava flow cools and contracts, cracking into hexagonal columns.</p>
<p>The Giant's Causeway in Northern Ireland has about forty thousand interlocking basalt columns.</p>
</article><footer>Copyright</footer></body></html>
"""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EvidenceStore]:
    with EvidenceStore.open(tmp_path / "store.duckdb") as opened:
        yield opened


def page_rows(store: EvidenceStore) -> list[tuple]:
    with store.cursor() as cur:
        return cur.execute("SELECT url, title, origin, published FROM pages ORDER BY url").fetchall()


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_folder_of_html_markdown_and_text(store: EvidenceStore, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "deeper").mkdir(parents=True)
    (docs / "basalt.html").write_text(ARTICLE, encoding="utf-8")
    (docs / "deeper" / "notes.md").write_text(
        "Intro line\n\n# Obsidian glass\n\nObsidian is volcanic glass.\n"
    )
    (docs / "plain.txt").write_text("\n  Pumice floats on water\nIt is full of gas bubbles.\n")
    (docs / "empty.txt").write_text("")
    (docs / "image.png").write_bytes(b"\x89PNG\r\n")
    (docs / "blank.html").write_text("<html><body><script>var x = 1;</script></body></html>")

    report = ingest_paths(store, [docs])

    assert (report.files, report.records, report.new, report.unchanged, report.changed) == (3, 3, 3, 0, 0)
    reasons = "\n".join(report.skipped)
    assert len(report.skipped) == 3
    assert "empty.txt: the file is empty" in reasons
    assert "image.png: unsupported file type .png" in reasons
    assert "blank.html: no text could be extracted" in reasons
    rows = {
        Path(url).name: (url, title, origin, published) for url, title, origin, published in page_rows(store)
    }
    assert set(rows) == {"basalt.html", "notes.md", "plain.txt"}
    assert rows["basalt.html"][0] == (docs / "basalt.html").resolve().as_uri()
    assert rows["basalt.html"][1] in {"Basalt columns", "Basalt columns - Geology Notes"}
    assert rows["basalt.html"][3] == "2021-06-15"
    assert rows["notes.md"][1] == "Obsidian glass"
    assert rows["plain.txt"][1] == "Pumice floats on water"
    assert {row[2] for row in rows.values()} == {Origin.ingested.value}
    basalt = store.latest_page(rows["basalt.html"][0])
    assert basalt is not None
    assert "forty thousand interlocking basalt columns" in basalt.text
    assert "Copyright" not in basalt.text  # boilerplate removed by trafilatura

    # The index was refreshed by ingest: the new page is searchable at once.
    results = LocalSearch(store).search("Giant's Causeway basalt", 3)
    assert results[0].page_id == basalt.id


def test_reingesting_counts_unchanged_and_changed(store: EvidenceStore, tmp_path: Path) -> None:
    note = tmp_path / "note.txt"
    note.write_text("First version of the note.")
    assert ingest_paths(store, [note]).new == 1
    again = ingest_paths(store, [note])
    assert (again.new, again.unchanged, again.changed) == (0, 1, 0)
    note.write_text("Second version of the note.")
    edited = ingest_paths(store, [note])
    assert (edited.new, edited.unchanged, edited.changed) == (0, 0, 1)
    latest = store.latest_page(note.resolve().as_uri())
    assert latest is not None and latest.text == "Second version of the note."


def test_jsonl_records_ignore_extra_keys(store: EvidenceStore, tmp_path: Path) -> None:
    corpus = write_jsonl(
        tmp_path / "corpus.jsonl",
        [
            '{"id": "x1", "url": "https://example.org/one", "title": "One", "text": "First record."}',
            "",
            '{"id": "x2", "url": "https://example.org/two", "text": "Second record, no title."}',
        ],
    )
    report = ingest_paths(store, [corpus], max_chars=10)
    assert (report.files, report.records, report.new) == (1, 2, 2)
    assert page_rows(store) == [
        ("https://example.org/one", "One", "ingested", None),
        ("https://example.org/two", "", "ingested", None),
    ]
    one = store.latest_page("https://example.org/one")
    assert one is not None and one.text == "First reco"


def test_a_malformed_jsonl_line_loads_nothing_at_all(store: EvidenceStore, tmp_path: Path) -> None:
    good = tmp_path / "a_good.txt"
    good.write_text("A perfectly good file.")
    corpus = write_jsonl(
        tmp_path / "b_corpus.jsonl",
        [
            '{"url": "https://example.org/1", "title": "1", "text": "one"}',
            '{"url": "https://example.org/2", "title": "2", "text": "two"}',
            '{"url": "https://example.org/3", "title": "3", "text": "thr',
            '{"url": "https://example.org/4", "title": "4", "text": "four"}',
        ],
    )
    with pytest.raises(IngestError) as raised:
        ingest_paths(store, [good, corpus])
    message = str(raised.value)
    assert f"{corpus} line 3" in message
    assert "not valid JSON" in message
    assert "no record of b_corpus.jsonl, and nothing at all, was loaded" in message
    assert page_rows(store) == []


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"title": "no url", "text": "body"}', 'no "url"'),
        ('{"url": "https://example.org/x", "title": "no text"}', 'no "text"'),
        ('["a", "list"]', "not a JSON object"),
        ('{"url": 5, "text": "body"}', 'no "url" string'),
        ('{"url": "https://example.org/x", "text": "body", "title": 5}', '"title" is not a string'),
        ('{"url": "https://example.org/x", "text": "half a pair \\ud800 here"}', "lone surrogate"),
        ('{"url": "https://example.org/x\\udfff", "text": "body"}', '"url" holds a lone surrogate'),
    ],
)
def test_a_record_missing_fields_loads_nothing(
    store: EvidenceStore, tmp_path: Path, line: str, problem: str
) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", ['{"url": "https://example.org/ok", "text": "fine"}', line])
    with pytest.raises(IngestError, match=problem) as raised:
        ingest_paths(store, [corpus])
    assert "line 2" in str(raised.value)
    assert page_rows(store) == []


def test_a_missing_path_loads_nothing(store: EvidenceStore, tmp_path: Path) -> None:
    good = tmp_path / "good.md"
    good.write_text("# Good\n\nBody.")
    with pytest.raises(IngestError, match="does not exist") as raised:
        ingest_paths(store, [good, tmp_path / "typo.md"])
    assert "the store is unchanged" in str(raised.value)
    assert page_rows(store) == []


def test_a_file_that_is_not_utf8_is_skipped(store: EvidenceStore, tmp_path: Path) -> None:
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    report = ingest_paths(store, [latin])
    assert report.files == 0
    assert report.skipped == [f"{latin}: not UTF-8 text (invalid continuation byte at byte 3)"]


def test_a_lone_surrogate_names_its_file_line_and_field(store: EvidenceStore, tmp_path: Path) -> None:
    corpus = write_jsonl(
        tmp_path / "c.jsonl",
        [
            '{"url": "https://example.org/ok", "text": "fine"}',
            '{"url": "https://example.org/x", "text": "a\\ud83d"}',
        ],
    )
    with pytest.raises(IngestError) as raised:
        ingest_paths(store, [corpus])
    assert str(raised.value) == (
        f'{corpus} line 2: "text" holds a lone surrogate (\\ud83d at character 1), not text '
        "(no record of c.jsonl, and nothing at all, was loaded)"
    )
    assert not store.path.exists() or page_rows(store) == []


def test_line_separators_inside_json_strings_do_not_split_records(
    store: EvidenceStore, tmp_path: Path
) -> None:
    # U+2028 and U+0085 are valid raw inside a JSON string; str.splitlines would cut the record there.
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        '{"url": "https://example.org/a", "text": "one\u2028two\x85three"}\n'
        '{"url": "https://example.org/b", "text": "b"}\n',
        encoding="utf-8",
    )
    report = ingest_paths(store, [corpus])
    assert (report.records, report.new) == (2, 2)


def test_page_text_is_cut_to_the_fetch_cap_and_the_cut_is_counted(
    store: EvidenceStore, tmp_path: Path
) -> None:
    corpus = write_jsonl(
        tmp_path / "c.jsonl",
        [
            json.dumps({"url": "https://example.org/huge", "text": "Lava cools. " * 30_000}),
            json.dumps({"url": "https://example.org/small", "text": "Small."}),
        ],
    )
    report = ingest_paths(store, [corpus])
    huge = store.latest_page("https://example.org/huge")
    assert (report.cut, report.max_chars) == (1, PAGE_TEXT_MAX_CHARS) == (1, Caps().page_text_max_chars)
    assert huge is not None and len(huge.text) == PAGE_TEXT_MAX_CHARS
    assert ingest_paths(store, [corpus], max_chars=1000).cut == 1


def test_control_characters_are_removed_and_line_breaks_kept(store: EvidenceStore, tmp_path: Path) -> None:
    corpus = write_jsonl(
        tmp_path / "c.jsonl",
        [
            json.dumps(
                {
                    "url": "https://example.org/a",
                    "title": "Red\x1b[31m title\nover two lines" + "x" * 400,
                    "text": "First line.\r\nSecond\tline\x07 with a bell.\x9b2J\rThird.",
                }
            )
        ],
    )
    ingest_paths(store, [corpus])
    page = store.latest_page("https://example.org/a")
    assert page is not None
    assert page.title.startswith("Red[31m title over two lines") and len(page.title) <= TITLE_MAX_CHARS
    assert page.text == "First line.\nSecond\tline with a bell.2J\nThird."


def test_an_ingest_of_nothing_creates_no_store(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "blank.txt").write_text("   \n")
    path = tmp_path / "never.duckdb"
    report = ingest_paths(EvidenceStore(path), [empty])
    assert (report.files, report.records) == (0, 0) and len(report.skipped) == 1
    assert not path.exists()


def test_records_with_distinct_fragments_or_ids_are_distinct_searchable_pages(
    store: EvidenceStore, tmp_path: Path
) -> None:
    import json

    def record(url: str, text: str, record_id: str | None = None) -> str:
        return json.dumps(
            {"url": url, "title": "Basalt", "text": text} | ({"id": record_id} if record_id else {})
        )

    paragraphs = [
        record("https://example.org/basalt#p1", "Basalt columns form when lava cools."),
        record("https://example.org/basalt#p2", "The causeway has forty thousand columns."),
        record("https://example.org/obsidian", "Obsidian forms when lava cools fast.", "ob-1"),
        record("https://example.org/obsidian", "Obsidian was used for blades.", "ob-2"),
    ]
    report = ingest_paths(store, [write_jsonl(tmp_path / "corpus.jsonl", paragraphs)])

    assert (report.new, report.changed) == (4, 0)
    assert [row[0] for row in page_rows(store)] == [
        "https://example.org/basalt#p1",
        "https://example.org/basalt#p2",
        "https://example.org/obsidian#ob-1",
        "https://example.org/obsidian#ob-2",
    ]
    assert {result.url for result in LocalSearch(store).search("lava cools", 10)} == {
        "https://example.org/basalt#p1",
        "https://example.org/obsidian#ob-1",
    }
    # Only the same record again, changed, is a new version of a page.
    paragraphs[1] = record("https://example.org/basalt#p2", "The causeway has about forty thousand columns.")
    again = ingest_paths(store, [write_jsonl(tmp_path / "corpus.jsonl", paragraphs)])
    assert (again.new, again.changed, again.unchanged) == (0, 1, 3)
    [found] = [result for result in LocalSearch(store).search("causeway", 10)]
    assert found.url.endswith("#p2") and "about forty thousand" in found.snippet  # the latest version only


def cli_ingest(path: Path, db: Path) -> tuple[int, str]:
    import subprocess
    import sys

    citeflow = str(Path(sys.executable).parent / "citeflow")
    done = subprocess.run([citeflow, "ingest", str(path), "--db", str(db)], capture_output=True, text=True)
    return done.returncode, done.stderr


def test_an_invalid_utf8_line_is_named_and_nothing_of_its_file_is_loaded(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    good = '{"url": "https://example.org/1", "text": "one"}\n'
    latin = '{"url": "https://example.org/2", "text": "caf\xe9"}\n'.encode("latin-1")
    corpus.write_bytes(good.encode() + latin)
    db = tmp_path / "store.duckdb"

    code, stderr = cli_ingest(corpus, db)

    assert code == 1 and "Traceback" not in stderr, stderr
    assert f"{corpus} line 2: is not UTF-8 text" in " ".join(stderr.split())
    assert not db.exists()


def test_json_nested_too_deeply_is_one_line_and_loads_nothing(tmp_path: Path) -> None:
    corpus = tmp_path / "deep.jsonl"
    corpus.write_text('{"url": "https://example.org/1", "text": ' + "[" * 100_000 + "]" * 100_000 + "}\n")

    code, stderr = cli_ingest(corpus, tmp_path / "store.duckdb")

    assert code == 1 and "Traceback" not in stderr, stderr
    assert "line 1: nests JSON values too deeply to read" in " ".join(stderr.split())


def corpus_of(path: Path, records: int) -> Path:
    """`records` records of 49 characters of text each, every third a second version of the one before it
    (the same URL, other text)."""
    lines = []
    for n in range(records):
        url = f"https://example.org/rocks/{n - 1 if n % 3 == 2 else n}"
        lines.append(
            json.dumps({"url": url, "text": f"Record {n:02d} says basalt cools into columns of rock."})
        )
    return write_jsonl(path, lines)


def test_a_corpus_is_written_a_batch_of_text_at_a_time_and_counted_as_one(
    store: EvidenceStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("storage.ingest.BATCH_CHARS", 200)  # five records a transaction
    writes: list[int] = []
    put_pages = store.put_pages

    def put(pages: list[PageInput], **kw: Any) -> IngestCounts:
        writes.append(len(pages))
        return put_pages(pages, **kw)

    monkeypatch.setattr(store, "put_pages", put)
    with store.cursor() as cur:
        (limit_before,) = cur.execute("SELECT current_setting('memory_limit')").fetchone()

    report = ingest_paths(store, [corpus_of(tmp_path / "rocks.jsonl", 30)])

    assert writes == [5] * 6
    assert (report.records, report.new, report.changed, report.unchanged) == (30, 20, 10, 0)
    assert store.page_count() == 30
    assert len(LocalSearch(store).search("basalt columns", 50)) == 20  # the latest version of each URL
    with store.cursor() as cur:
        assert cur.execute("SELECT current_setting('memory_limit')").fetchone() == (limit_before,)


def disk_full_at_third_write(store: EvidenceStore, monkeypatch: pytest.MonkeyPatch) -> None:
    put_pages = store.put_pages
    writes = iter(range(100))

    def put(pages: list[PageInput], **kw: Any) -> IngestCounts:
        if next(writes) == 2:
            raise OSError(28, "No space left on device")
        return put_pages(pages, **kw)

    monkeypatch.setattr(store, "put_pages", put)


def test_a_write_that_fails_part_way_keeps_earlier_batches_and_a_rerun_stores_the_rest(
    store: EvidenceStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = corpus_of(tmp_path / "rocks.jsonl", 30)
    monkeypatch.setattr("storage.ingest.BATCH_CHARS", 200)
    put_pages = store.put_pages
    disk_full_at_third_write(store, monkeypatch)
    with pytest.raises(OSError):
        ingest_paths(store, [corpus])
    assert store.page_count() == 10  # the two batches committed before the failure

    monkeypatch.setattr(store, "put_pages", put_pages)
    again = ingest_paths(store, [corpus])
    assert (again.new, again.changed, again.unchanged) == (13, 7, 10)
    assert store.page_count() == 30


def test_a_new_store_whose_write_fails_part_way_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("storage.ingest.BATCH_CHARS", 200)
    path = tmp_path / "new.duckdb"
    store = EvidenceStore(path)
    disk_full_at_third_write(store, monkeypatch)
    with pytest.raises(OSError):
        ingest_paths(store, [corpus_of(tmp_path / "rocks.jsonl", 30)])
    store.close()
    assert not path.exists() and not path.with_name("new.duckdb.wal").exists()
