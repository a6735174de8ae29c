"""`citeflow ingest`: load local files into the evidence store.

Bad input loses nothing: every file is checked first, and only then are pages written. A malformed record
(bad JSON, invalid UTF-8, nesting too deep) or a missing path stops the whole ingest before anything is
written, naming the file and line; a file with nothing to load (empty, unsupported, HTML with no
extractable text) is skipped with a reason and the rest goes in. Nothing to load at all opens no store, so
creates no file.

JSON Lines files stream: they are read line by line twice, once to check every record and once to write
them, a transaction per BATCH_CHARS of text, with DuckDB held to INGEST_MEMORY_LIMIT, so a 1 GB corpus
never has to fit in memory (one transaction for all of it held every page in memory until its commit). A
write that fails part way (a full disk, a killed process) keeps the batches committed before it: the
same ingest run again stores the rest and counts those as unchanged. A store this ingest created is
removed if the write fails.

Page text is cut to the same cap as fetched pages (Caps.page_text_max_chars), and the report says how
many records were cut: one huge record would otherwise slow every later run that reads it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

from citeflow.config import Caps
from citeflow.contracts import Origin, PageInput
from citeflow.errors import IngestError
from citeflow.web.extract import TITLE_MAX_CHARS, first_line_title, html_document
from storage.search import refresh_index
from storage.store import EvidenceStore

HTML_SUFFIXES = frozenset({".html", ".htm"})
MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
TEXT_SUFFIXES = frozenset({".txt"})
JSONL_SUFFIXES = frozenset({".jsonl"})
SUPPORTED = HTML_SUFFIXES | MARKDOWN_SUFFIXES | TEXT_SUFFIXES | JSONL_SUFFIXES
NOTHING_LOADED = "nothing was loaded; the store is unchanged"
PAGE_TEXT_MAX_CHARS = Caps().page_text_max_chars
# Page text written a transaction at a time: what DuckDB holds uncommitted, about twice this in memory.
BATCH_CHARS = 4_000_000
# What DuckDB may hold in memory (buffer pool) while writing the pages of an ingest into a store file,
# spilling the rest to disk; DuckDB's process grows past it by what it keeps outside the pool (about
# 300 MB in all for 1 GB of pages, storage/files.py ROW_GROUP_SIZE).
INGEST_MEMORY_LIMIT = "128MB"
# ... and while indexing them after (storage/search.py INDEX_BATCH_PAGES): a 1 GB ingest of 454,297
# pages peaked at 398 MB in all with this limit (8 min 57 s), at 471 MB with 192 MB and passes of 5,000
# (7 min 35 s); before a pass had a session of its own, 708 MB at 256 MB.
INDEX_MEMORY_LIMIT = "128MB"


class IngestReport(BaseModel):
    files: int = Field(default=0, description="Files that gave at least one page.")
    records: int = Field(default=0, description="Pages parsed from those files.")
    new: int = 0
    unchanged: int = 0
    changed: int = 0
    cut: int = Field(default=0, description="Records whose text was longer than max_chars, stored cut to it.")
    max_chars: int = Field(description="The page-text cap the records were stored under.")
    skipped: list[str] = Field(default_factory=list, description="'<path>: <reason>' for each file skipped.")


class Skip(Exception):
    """A file with nothing to load: reported, not fatal."""


def expand(paths: list[Path]) -> list[Path]:
    """Every file named, and every file under every folder named, in a stable order."""
    files: list[Path] = []
    for path in paths:
        if not path.exists():
            raise IngestError(str(path), "does not exist", NOTHING_LOADED)
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.is_file()))
        else:
            files.append(path)
    return files


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise Skip(f"not UTF-8 text ({error.reason} at byte {error.start})") from error


def text_title(text: str, path: Path, markdown: bool) -> str:
    """The first Markdown heading, else the first non-empty line, else the file name."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if markdown:
        for line in lines:
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
                if heading:
                    return heading[:TITLE_MAX_CHARS]
    return first_line_title(text) or path.stem


def parse_text_file(path: Path, markdown: bool) -> list[PageInput]:
    text = read_text(path)
    if not text.strip():
        raise Skip("the file is empty")
    title = text_title(text, path, markdown)
    return [PageInput(url=path.resolve().as_uri(), title=title, text=text.strip(), origin=Origin.ingested)]


def parse_html_file(path: Path) -> list[PageInput]:
    raw = path.read_bytes()
    if not raw.strip():
        raise Skip("the file is empty")
    # Recall first: a file on disk was chosen by a person, so keep what the page says.
    extracted = html_document(raw, url=None, favor_recall=True)
    if extracted is None:
        raise Skip("no text could be extracted from the HTML")
    return [
        PageInput(
            url=path.resolve().as_uri(),
            title=extracted.title or path.stem[:TITLE_MAX_CHARS],
            text=extracted.text,
            origin=Origin.ingested,
            published=extracted.published,
        )
    ]


def jsonl_records(path: Path) -> Iterator[tuple[PageInput, str | None]]:
    """Each record of a JSON Lines file, {"url", "title", "text"} and an optional "id" (other keys are
    ignored; blank lines are allowed), with its id, read one line at a time.

    A malformed line stops the ingest: a corpus that loads partly would silently lose records.
    """
    failed = f"no record of {path.name}, and nothing at all, was loaded"
    with path.open("rb") as handle:
        # Split on \n alone, as bytes: str.splitlines also splits at U+2028 and others a JSON string may hold.
        for number, raw in enumerate(handle, start=1):
            where = f"{path} line {number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise IngestError(
                    where, f"is not UTF-8 text ({error.reason} at byte {error.start})", failed
                ) from None
            if not line.strip():
                continue
            yield jsonl_record(line, where, failed)


def jsonl_record(line: str, where: str, failed: str) -> tuple[PageInput, str | None]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise IngestError(where, f"is not valid JSON ({error.msg})", failed) from None
    except RecursionError:
        raise IngestError(where, "nests JSON values too deeply to read", failed) from None
    if not isinstance(record, dict):
        raise IngestError(where, "is not a JSON object", failed)
    url, text, title = record.get("url"), record.get("text"), record.get("title", "")
    if not isinstance(url, str) or not url.strip():
        raise IngestError(where, 'has no "url" string', failed)
    if not isinstance(text, str) or not text.strip():
        raise IngestError(where, 'has no "text" string', failed)
    if not isinstance(title, str):
        raise IngestError(where, '"title" is not a string', failed)
    for name, value in (("url", url), ("title", title), ("text", text)):
        _check_encodable(value, name, where, failed)
    page = PageInput(
        url=url.strip(), title=title.strip()[:TITLE_MAX_CHARS], text=text.strip(), origin=Origin.ingested
    )
    return page, str(record["id"]) if isinstance(record.get("id"), str | int) else None


@dataclass
class JsonlFile:
    """A JSON Lines file checked whole: how many records, how many longer than the cap, and which URLs
    more than one of its records share (see distinct_url)."""

    path: Path
    records: int = 0
    cut: int = 0
    shared: set[str] = field(default_factory=set)


def check_jsonl_file(path: Path, max_chars: int) -> JsonlFile:
    checked = JsonlFile(path)
    urls: Counter[str] = Counter()
    for page, _ in jsonl_records(path):
        checked.records += 1
        checked.cut += len(page.text) > max_chars
        urls[page.url] += 1
    if not checked.records:
        raise Skip("the file has no records")
    checked.shared = {url for url, count in urls.items() if count > 1}
    return checked


def distinct_url(page: PageInput, record_id: str | None, shared: set[str]) -> PageInput:
    """Records of one file that share a URL but have ids of their own are distinct pages, not versions of
    one: each such URL gets its record's id as fragment (the store keeps an ingested page's fragment)."""
    if page.url in shared and record_id and "#" not in page.url:
        return page.model_copy(update={"url": f"{page.url}#{record_id}"})
    return page


def parse_jsonl_file(path: Path) -> list[PageInput]:
    """Every record of a JSON Lines file, in memory (for small files and tests; ingest streams)."""
    shared = check_jsonl_file(path, PAGE_TEXT_MAX_CHARS).shared
    return [distinct_url(page, record_id, shared) for page, record_id in jsonl_records(path)]


def _check_encodable(value: str, field: str, where: str, failed: str) -> None:
    """JSON may escape half of a UTF-16 pair ("\\ud800"); Python decodes it to a lone surrogate, which no
    UTF-8 text, hash or database can hold."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        code = f"\\u{ord(value[error.start]):04x}"
        raise IngestError(
            where, f'"{field}" holds a lone surrogate ({code} at character {error.start}), not text', failed
        ) from error


def parse_file(path: Path) -> list[PageInput]:
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED:
        raise Skip(
            f"unsupported file type {suffix or '(none)'}; use .html, .htm, .md, .markdown, .txt or .jsonl"
        )
    if path.stat().st_size == 0:
        raise Skip("the file is empty")
    if suffix in HTML_SUFFIXES:
        return parse_html_file(path)
    if suffix in JSONL_SUFFIXES:
        return parse_jsonl_file(path)
    return parse_text_file(path, markdown=suffix in MARKDOWN_SUFFIXES)


def ingest_paths(
    store: EvidenceStore, paths: list[Path], max_chars: int = PAGE_TEXT_MAX_CHARS
) -> IngestReport:
    """Check every file under `paths`, then store all pages, each text cut to `max_chars`, a batch of
    about BATCH_CHARS characters a transaction, and refresh the index. With nothing to store, the store
    is not opened at all."""
    report = IngestReport(max_chars=max_chars)
    pages: list[PageInput] = []  # of HTML, Markdown and text files: one page each
    jsonl: list[JsonlFile] = []
    for path in expand([Path(p) for p in paths]):
        try:
            if path.suffix.lower() in JSONL_SUFFIXES and path.stat().st_size:
                checked = check_jsonl_file(path, max_chars)
                jsonl.append(checked)
                report.records += checked.records
                report.cut += checked.cut
            else:
                parsed = parse_file(path)
                report.records += len(parsed)
                report.cut += sum(len(page.text) > max_chars for page in parsed)
                pages.extend(parsed)
        except Skip as skip:
            report.skipped.append(f"{path}: {skip}")
            continue
        except OSError as error:
            raise IngestError(str(path), f"could not be read ({error.strerror})", NOTHING_LOADED) from error
        report.files += 1
    if not report.records:
        return report

    created = not store.is_lake and not store.path.exists()
    written = False
    try:
        with store.memory_limit(INGEST_MEMORY_LIMIT), store.session():  # one open for all the writes
            for batch in _batches(pages, jsonl):
                counts = store.put_pages(batch, max_chars=max_chars)
                report.new += counts.new
                report.unchanged += counts.unchanged
                report.changed += counts.changed
        written = True
        # In a session of its own: closing the first checkpointed the pages, which DuckDB can then page
        # out; left in memory, they filled the limit and the index ran out of it.
        with store.memory_limit(INDEX_MEMORY_LIMIT):
            refresh_index(store)  # stopped part way, it is taken up by the next refresh
    except BaseException:
        if created and not written:  # all the store holds is part of this ingest: leave no store behind
            for made in (store.path, store.path.with_name(store.path.name + ".wal")):
                made.unlink(missing_ok=True)
        raise
    return report


def _batches(pages: list[PageInput], jsonl: list[JsonlFile]) -> Iterator[list[PageInput]]:
    """The pages of the text files, then each JSON Lines file's records read again, in batches of about
    BATCH_CHARS characters of text."""
    if pages:
        yield pages
    for checked in jsonl:
        batch: list[PageInput] = []
        chars = 0
        for page, record_id in jsonl_records(checked.path):
            batch.append(distinct_url(page, record_id, checked.shared))
            chars += len(page.text)
            if chars >= BATCH_CHARS:
                yield batch
                batch, chars = [], 0
        if batch:
            yield batch
