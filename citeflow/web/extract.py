"""Turn a fetched body into page text, title and publication date.

HTML goes through trafilatura (main text only; fetched pages favour precision over recall, files
ingested from disk recall, through the same `html_document`), PDF through pypdf, plain text is
decoded as is. A body that claims to be text but is binary is refused: it
would otherwise become pages of noise that quotes could be "found" in.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from citeflow.errors import FetchError

# trafilatura and pypdf are imported by the functions that use them: together they take a quarter of a
# second to import, on the path to a run's first task, and a run that searches the store reads no HTML.

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
PDF_PAGES_MAX = 300  # extraction time grows with pages; a longer PDF is read up to here
SNIFF_BYTES = 65_536
CONTROL_MAX = 0.05  # share of control bytes above which a body is "not text"
TEXT_CONTROLS = frozenset(b"\t\n\r\f\x1b")
TITLE_MAX_CHARS = 300  # one limit for every title stored in pages.title, fetched or ingested


@dataclass(frozen=True)
class Extracted:
    title: str
    text: str
    published: str | None


def media_type(content_type: str) -> tuple[str, str | None]:
    """`text/html; charset=UTF-8` -> ('text/html', 'utf-8')."""
    mime, _, params = content_type.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'").lower()
    return mime.strip().lower(), charset


def _check_is_text(url: str, body: bytes) -> None:
    """Judged on bytes, not on a decoding, so text in any ASCII-compatible charset passes while
    random binary (about 11% control bytes) does not."""
    sample = body[:SNIFF_BYTES]
    if b"\x00" in sample:
        raise FetchError(url, "not text: the body holds NUL bytes (a binary file served as text)")
    control = sum(1 for byte in sample if (byte < 32 and byte not in TEXT_CONTROLS) or byte == 0x7F)
    if sample and control / len(sample) > CONTROL_MAX:
        raise FetchError(url, f"not text: {control} of the first {len(sample)} bytes are control bytes")


def first_line_title(text: str) -> str:
    """The first non-empty line, cut to the title limit; "" when there is none."""
    first_line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first_line[:TITLE_MAX_CHARS]


def html_document(body: bytes, url: str | None, favor_recall: bool) -> Extracted | None:
    """Main text, title and date of an HTML body; None when it holds no readable main text.

    Raw bytes, so trafilatura reads the page's own charset declaration. `favor_recall` is for files
    a person chose to ingest: keep more of the page, comments included. Fetched pages favour
    precision and drop comments: boilerplate is text a quote could be "found" in.
    """
    import trafilatura
    from trafilatura.settings import Document

    document = trafilatura.bare_extraction(
        body,
        url=url,
        favor_precision=not favor_recall,
        favor_recall=favor_recall,
        include_comments=favor_recall,
        with_metadata=True,
    )
    # as_dict is off, so a result is a Document; anything else means no extraction.
    if not isinstance(document, Document) or not (document.text or "").strip():
        return None
    return Extracted(
        title=(document.title or "").strip()[:TITLE_MAX_CHARS],
        text=(document.text or "").strip(),
        published=document.date or None,
    )


def _html(url: str, body: bytes) -> Extracted:
    extracted = html_document(body, url, favor_recall=False)
    if extracted is None:
        raise FetchError(url, "no readable main text in the HTML")
    return extracted


def _pdf(url: str, body: bytes) -> Extracted:
    import pypdf
    from pypdf.errors import PyPdfError

    try:
        reader = pypdf.PdfReader(io.BytesIO(body))
        pages = [page.extract_text() or "" for page in reader.pages[:PDF_PAGES_MAX]]
        metadata = reader.metadata
        title = (metadata.title or "") if metadata else ""
        created = metadata.creation_date if metadata else None
    except (PyPdfError, ValueError, KeyError) as error:  # pypdf raises these for damaged files
        raise FetchError(url, f"unreadable PDF ({error})") from error
    text = "\n\n".join(page.strip() for page in pages if page.strip())
    if not text:
        raise FetchError(url, "the PDF has no extractable text (scanned images?)")
    published = created.date().isoformat() if created else None
    return Extracted(title=str(title).strip()[:TITLE_MAX_CHARS], text=text, published=published)


def _plain(url: str, body: bytes, charset: str | None) -> Extracted:
    try:
        text = body.decode(charset or "utf-8", errors="replace").strip()
    except LookupError:
        text = body.decode("utf-8", errors="replace").strip()
    if not text:
        raise FetchError(url, "the text body is empty")
    return Extracted(title=first_line_title(text), text=text, published=None)


def extract(url: str, body: bytes, content_type: str) -> Extracted:
    """Title, main text and publication date of a body; FetchError when it holds no usable text."""
    mime, charset = media_type(content_type)
    if mime == "application/pdf" or (mime == "application/octet-stream" and body.startswith(b"%PDF-")):
        return _pdf(url, body)
    if mime in HTML_TYPES or mime == "text/plain":
        _check_is_text(url, body)
        return _html(url, body) if mime in HTML_TYPES else _plain(url, body, charset)
    raise FetchError(url, f"content type {mime or '(none)'!r} is not HTML, plain text or PDF")
