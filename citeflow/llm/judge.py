"""A model judging which sentence of a report states a key fact (a nugget), as SummHay's model judge does,
beside the lexical judgment `citeflow eval` always makes (tasks/evaluation.py).

The model is shown the key fact and the report's sentences numbered S1, S2, ... and replies with one line,
`S3: full`, `S3: partial` or `none`: a format a small model keeps. The program enforces it: a reply that
names no sentence of the report is asked again once, with the exact problem, and then the caller falls
back to the lexical judgment for that nugget and counts it.
"""

from __future__ import annotations

import re

from citeflow.llm.client import RoleClient
from citeflow.llm.prompts import UNTRUSTED_RULE, Message, untrusted

# Coverage of a key fact by a sentence that states it whole, or part of it (SummHay's full / partial).
COVERAGE = {"full": 1.0, "partial": 0.5}
_TASK = (
    "You judge whether a report states a key fact. The report's sentences are numbered S1, S2 and so on. "
    "Reply with exactly one line: 'S<number>: full' when that sentence states the whole key fact, "
    "'S<number>: partial' when it states part of it and no sentence states all of it, or 'none' when no "
    "sentence states it. No other text."
)
_VERDICT = re.compile(r"^\s*(?:\**S(\d+)\**\s*[:.)-]?\s*\**(full|partial)\b|\**(none)\b)", re.IGNORECASE)


def judge_messages(nugget: str, sentences: list[str]) -> list[Message]:
    numbered = "\n".join(f"S{number}: {' '.join(text.split())}" for number, text in enumerate(sentences, 1))
    return [
        {"role": "system", "content": f"{_TASK}\n\n{UNTRUSTED_RULE}"},
        {
            "role": "user",
            "content": f"{untrusted('key fact', nugget)}\n\n{untrusted('report sentences', numbered)}",
        },
    ]


def parse_verdict(text: str, sentences: int) -> tuple[int | None, float]:
    """(index of the sentence that states the key fact, its coverage), or (None, 0.0) for none.
    ValueError, saying what was wrong, when the reply's first verdict line names no sentence."""
    for line in text.splitlines():
        found = _VERDICT.match(line)
        if not found:
            continue
        if found.group(3):
            return None, 0.0
        number = int(found.group(1))
        if not 1 <= number <= sentences:
            raise ValueError(f"S{number} is no sentence of the report (S1 to S{sentences})")
        return number - 1, COVERAGE[found.group(2).casefold()]
    raise ValueError(
        "no line reads 'S<number>: full', 'S<number>: partial' or 'none'; reply with that line only"
    )


class ModelJudge:
    """The judging model, one call a nugget (and one retry for an unusable reply)."""

    def __init__(self, client: RoleClient) -> None:
        self.client = client

    def __call__(self, nugget: str, sentences: list[str]) -> tuple[int | None, float]:
        """(index, coverage) of the sentence stating `nugget`, (None, 0.0) for none; ValueError when both
        replies were unusable, and the client's errors when the endpoint fails."""
        return self.client.complete_read(
            judge_messages(nugget, sentences), lambda reply: parse_verdict(reply, len(sentences))
        )
