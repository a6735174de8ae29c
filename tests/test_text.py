"""Normalisation, the offset map back to the original, sentence splitting and word tokens."""

from __future__ import annotations

import pytest

from citeflow.text import (
    content_words,
    names,
    normalise,
    normalise_with_map,
    numbers,
    prose_sentences,
    reads_as_prose,
    split_sentences,
    stem,
    words,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("“Heat” and ‘Ran’", "\"Heat\" and 'Ran'"),
        ("„low“ «guillemets» 5′ 6″", '"low" "guillemets" 5\' 6"'),
        ("1914–1918 — a war ‐ ‑ ‒ ― −", "1914-1918 - a war - - - - -"),
        ("non\u00a0breaking\u2009thin\u3000ideographic", "non breaking thin ideographic"),
        ("  runs \t of\n\n white   space  ", "runs of white space"),
        ("ﬁne ﬂour, Ｆｕｌｌ width, ½", "fine flour, Full width, 1⁄2"),
        ("Cafe\u0301 = Café", "Café = Café"),
        ("zero\u200bwidth co\u00adoperate", "zerowidth cooperate"),
        ("", ""),
    ],
)
def test_normalise(raw: str, expected: str) -> None:
    assert normalise(raw) == expected


def test_offset_map_points_every_normalised_span_back_at_its_original() -> None:
    original = "  The “Blue  Lacy” — official\u00a0breed of Texas ﬁrst, in 1920s…\n"
    mapped = normalise_with_map(original)
    assert mapped.text == normalise(original)
    for start in range(len(mapped.text)):
        for end in range(start + 1, len(mapped.text) + 1):
            piece = mapped.text[start:end]
            if piece != piece.strip():
                continue  # a quote is stripped, so spans never start or end on white space
            first, last = mapped.original_span(start, end)
            assert piece in normalise(original[first:last])


def test_offset_map_of_a_quoted_phrase() -> None:
    original = "He said \u201cthe  film\u201d\u00a0was shot in 1986."
    mapped = normalise_with_map(original)
    at = mapped.text.index('"the film"')
    first, last = mapped.original_span(at, at + len('"the film"'))
    assert original[first:last] == "\u201cthe  film\u201d"


def test_original_span_rejects_a_span_outside_the_text() -> None:
    with pytest.raises(ValueError, match="not inside"):
        normalise_with_map("abc").original_span(2, 5)


def _texts(text: str) -> list[str]:
    return [span.text for span in split_sentences(text)]


def test_split_sentences_keeps_abbreviations_initials_and_decimals() -> None:
    text = (
        "Dr. Smith met Mr. Jones at St. Paul's in the U.S. Army base. "
        "J. R. R. Tolkien wrote it, e.g. in 1937. It cost 3.5 million dollars! Was it worth it? Yes."
    )
    assert _texts(text) == [
        "Dr. Smith met Mr. Jones at St. Paul's in the U.S. Army base.",
        "J. R. R. Tolkien wrote it, e.g. in 1937.",
        "It cost 3.5 million dollars!",
        "Was it worth it?",
        "Yes.",
    ]


def test_split_sentences_number_abbreviations_only_before_numbers() -> None:
    text = "It was No. 1 in c. 1200 on p. 4. The answer was no. Then it ended."
    assert _texts(text) == ["It was No. 1 in c. 1200 on p. 4.", "The answer was no.", "Then it ended."]


def test_split_sentences_keeps_closing_quotes_and_brackets_with_their_sentence() -> None:
    text = 'She said "It is over." Then she left. (He stayed.) "Why?" he asked.'
    assert _texts(text) == ['She said "It is over."', "Then she left.", "(He stayed.)", '"Why?" he asked.']


def test_split_sentences_breaks_at_headings_but_not_wrapped_lines() -> None:
    text = "Early life\nNolan was born in London. He grew up\nin Chicago.\n\nCareer\nHe directed films."
    assert _texts(text) == [
        "Early life",
        "Nolan was born in London.",
        "He grew up\nin Chicago.",
        "Career",
        "He directed films.",
    ]


def test_split_sentences_offsets_are_verbatim_substrings() -> None:
    text = "  First one.  Second  one (really).\n\nThird “quoted” one. "
    spans = split_sentences(text)
    assert len(spans) == 3
    for span in spans:
        assert text[span.start : span.end] == span.text
        assert span.text == span.text.strip()


def test_split_sentences_joins_lines_wrapped_before_inline_code_and_breaks_at_blank_lines() -> None:
    text = "Ids are plain text: claims are\n`C1, C2` and sources `S1`.\n\nnext paragraph in lower case."
    assert _texts(text) == [
        "Ids are plain text: claims are\n`C1, C2` and sources `S1`.",
        "next paragraph in lower case.",
    ]


MARKDOWN = """# How citeflow works

Citeflow is a research assistant built as a Prefect workflow. It needs no key.

## Tables

| table | what it holds |
|-------|---------------|
| runs | one row per run. Its status and question. |

```sh
citeflow sql "SELECT 1"
This line is inside a code fence and reads like prose.
```

The latest runs, with their status:

- The planner splits the question into sub-questions.
2. The verifier reads each page once per run.
> A quoted remark that still reads as prose.
- `run_id`, `id` (`q1`, ...), `position` (order in the report), `text` (as shown).
- A run that is still `running` with no `ended_at` was interrupted.
- Yes, it does.
"""


def test_prose_sentences_of_a_markdown_page() -> None:
    spans = prose_sentences(MARKDOWN, min_chars=20)
    assert [span.text for span in spans] == [
        "Citeflow is a research assistant built as a Prefect workflow.",
        "The planner splits the question into sub-questions.",
        "The verifier reads each page once per run.",
        "A quoted remark that still reads as prose.",
        "A run that is still `running` with no `ended_at` was interrupted.",
    ]
    # Markers are trimmed by moving the start: every span is still verbatim.
    assert all(MARKDOWN[span.start : span.end] == span.text for span in spans)


def test_an_unclosed_code_fence_runs_to_the_end() -> None:
    text = "A sentence before the code block.\n```\nprint('this is code and not a sentence')\n"
    assert [span.text for span in prose_sentences(text)] == ["A sentence before the code block."]


@pytest.mark.parametrize(
    ("sentence", "prose"),
    [
        ("Helen Hunt (born June 15, 1963) is an American actress.", True),
        ("(He is not related to fellow director Charles Vidor).", True),
        ("Change the file with `--db` or with the `CITEFLOW_DB` variable.", True),
        ("`reason` (why it was rejected), `source_id` (the source it is cited as).", False),
        ("Restrict it with `fts_main_pages.match_bm25(id, 'basalt', fields := 'title')`.", False),
        ("The latest runs, with their status:", False),
        ("|---|---|---|---|---| a b |", False),
        ("Q). 1243 ).", False),
        ("It does.", False),
    ],
)
def test_reads_as_prose(sentence: str, prose: bool) -> None:
    assert reads_as_prose(sentence) is prose


def test_split_sentences_of_nothing() -> None:
    assert split_sentences("   \n ") == []


def test_words_and_content_words() -> None:
    assert words("The “Blue Lacy” is Texas’ dog.") == ["the", "blue", "lacy", "is", "texas", "dog"]
    assert content_words("The Blue Lacy is the official dog of Texas.") == [
        "blue",
        "lacy",
        "official",
        "dog",
        "texas",
    ]


def test_numbers_and_names() -> None:
    assert numbers("In 1,000 BC and 3.5 km, 2,141 people and 1990s") == ["1000", "3.5", "2141", "1990"]
    assert names("The film by Christopher Nolan, an English-American director, won at the BBC.") == [
        "Christopher",
        "Nolan",
        "English-American",
        "BBC",
    ]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("featuring", "features"),
        ("starred", "star"),
        ("sponsered", "sponsored"),
        ("hosted", "host"),
        ("games", "game"),
        ("stories", "story"),
        ("boxes", "box"),
    ],
)
def test_stem_joins_word_forms(first: str, second: str) -> None:
    assert stem(first) == stem(second)


def test_stem_keeps_different_words_apart() -> None:
    assert stem("film") != stem("director")
