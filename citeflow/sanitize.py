"""Text from pages, files, models and people, made safe to store, print and render.

A page or a question may carry control characters (an ESC sequence recolours a terminal or moves its
cursor; a backspace or carriage return overwrites what was printed) and HTML (which a Markdown viewer
renders). Text is cleaned once on the way in (the contracts apply `clean_line` and `clean_text`), and
escaped again on the way out, since a store written by an older citeflow holds text never cleaned.
"""

from __future__ import annotations

import html
import re

# C0 controls but tab and newline, DEL, and C1 controls (U+009B is a one-character terminal CSI).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_LINE_BREAKS = re.compile(r"\r\n?")
# Half of a UTF-16 pair, left by a bad JSON escape or by undecodable command-line bytes: not text,
# and unencodable as UTF-8 (it would crash a hash, a print or the database).
_LONE_SURROGATES = re.compile(r"[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def clean_text(text: str) -> str:
    """Page text: line breaks become \\n, tabs stay (sentence splitting relies on line breaks), every
    other control character goes, and a lone surrogate becomes U+FFFD."""
    text = _LONE_SURROGATES.sub(REPLACEMENT, text)
    return _CONTROLS.sub("", _LINE_BREAKS.sub("\n", text))


def clean_line(text: str) -> str:
    """A question or title: one line, runs of white space as one space, no control characters."""
    return " ".join(clean_text(text).split())


def for_terminal(text: str) -> str:
    """Text to print: no control character can recolour the terminal or move its cursor. Print it
    with rich markup off (or through rich.markup.escape), or "[red]" in a page title would colour."""
    return clean_text(text)


def for_markdown(text: str) -> str:
    """Text placed in the Markdown report: no HTML any source wrote can render as HTML."""
    return html.escape(clean_text(text), quote=False)
