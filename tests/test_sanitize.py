"""Clean input, clean output: control characters never stored or shown, HTML never rendered from a report."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from citeflow.contracts import (
    Critique,
    Draft,
    DraftSentence,
    Origin,
    PageInput,
    Question,
    RunMetrics,
    RunStatus,
    Source,
    SubQuestion,
)
from citeflow.sanitize import clean_line, clean_text, for_markdown, for_terminal
from storage.store import EvidenceStore
from tasks.finish import finish, render_markdown
from tasks.writer import LoopEnd, Review

HOSTILE = "<script>alert(1)</script> & <b>bold</b> \x1b[31mred\x1b[0m\x9b2J\x08\x07"


def test_clean_text_keeps_line_breaks_and_tabs_and_drops_every_other_control() -> None:
    assert clean_text("a\r\nb\rc\nd\te") == "a\nb\nc\nd\te"
    assert clean_text("x\x00\x1b[31my\x7f\x85\x9bz") == "x[31myz"
    assert clean_text("lone \ud800 half") == "lone \ufffd half"
    assert clean_text("déjà vu — “quoted” 東京") == "déjà vu — “quoted” 東京"


def test_clean_line_is_one_line() -> None:
    assert clean_line("  What is\n\tbasalt?\x1b[0m  ") == "What is basalt?[0m"


def test_output_escapes() -> None:
    assert for_terminal(HOSTILE) == "<script>alert(1)</script> & <b>bold</b> [31mred[0m2J"
    assert (
        for_markdown(HOSTILE)
        == "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt; [31mred[0m2J"
    )


def test_the_contracts_clean_questions_titles_and_page_text() -> None:
    assert Question(text="Why\x1b[2J is\nthe sky blue?\x07").text == "Why[2J is the sky blue?"
    sub = SubQuestion(id="q1", position=0, text="Why\x1b[31m?", query="sky\x00 blue\n")
    assert (sub.text, sub.query) == ("Why[31m?", "sky blue")
    page = PageInput(url="https://example.org/", title="T\x1b\ni", text="A.\r\nB\x0c.", origin=Origin.fetched)
    assert (page.title, page.text) == ("T i", "A.\nB.")
    with pytest.raises(ValueError, match="the question is empty"):
        Question(text="\x1b\x07 \n")


def test_the_report_escapes_html_from_every_source() -> None:
    sub = SubQuestion(id="q1", position=0, text=f"Sub {HOSTILE}", query="q")
    draft = Draft(sentences=[DraftSentence(text=f"Sentence {HOSTILE}", cites=["S1"], section="q1")])
    review = Review(draft, Critique(approved=True), 0, LoopEnd.approved, {})
    source = Source(
        id="S1",
        page_id="p1",
        url="https://example.org/<img src=x onerror=alert(1)>",
        title=f"Title {HOSTILE}",
        stored_at=datetime(2026, 1, 2, tzinfo=UTC),
    )

    markdown = render_markdown(
        f"Question {HOSTILE}", "model<i>", RunStatus.partial, [sub], review, [source], [f"Caveat {HOSTILE}"]
    )

    assert "<" not in markdown and "\x1b" not in markdown and "\x9b" not in markdown
    for line in (
        "# Question &lt;script&gt;",
        "- Sentence &lt;script&gt;",
        "- Caveat &lt;script&gt;",
    ):
        assert line in markdown
    assert "- [S1] Title &lt;script&gt;alert(1)&lt;/script&gt; &amp; " in markdown
    assert "https://example.org/&lt;img src=x onerror=alert(1)&gt;" in markdown
    assert "by model&lt;i&gt;, from verified quotes" in markdown


def test_a_failed_run_writes_no_report_file_and_its_row_says_why(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "store.duckdb")
    store.start_run("r1", "Why?", "extractive", "local", "{}")
    reports = tmp_path / "reports"
    sub = SubQuestion(id="q1", position=0, text="Why?", query="why")

    report = finish(store, "r1", "Why?", "extractive", [sub], None, [], [], 0, 0, RunMetrics(), reports, [])

    assert report.status is RunStatus.failed and report.report_path is None
    assert not reports.exists()
    [(status, markdown, path)] = store.query("SELECT status, report_markdown, report_path FROM runs")[1]
    assert (status, path) == ("failed", None)
    assert (
        "No report could be written" in markdown and 'No verified evidence was found for "Why?"' in markdown
    )
