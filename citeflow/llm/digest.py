"""The synthesiser model's digest of an open question, in a reply format a small model keeps.

The model is not shown raw claims: it is shown the extractive digest's merged findings (each with an id,
its pages and one verified quote, citeflow/extractive/digest.py), as many as the context window holds,
and replies with one line per finding it keeps: `F3: one sentence stating it`. The program, not the
model, attaches each finding's citations (every page that states it) and its section; the first lines
the model writes are the opening. Every sentence then passes the same citation checks as any draft, and
the extractive digest is its floor (tasks/writer.py adds the findings the model left out).
"""

from __future__ import annotations

import re

from citeflow.contracts import Draft, DraftSentence, SynthesisInput
from citeflow.extractive.digest import OPENING_FINDINGS, Finding, digest
from citeflow.llm.client import RoleClient
from citeflow.llm.errors import InvalidReply
from citeflow.llm.prompts import UNTRUSTED_RULE, Message, untrusted

# Findings offered to the model: twice what a report states, so it can choose; fewer when the window is
# small.
CANDIDATES_PER_FINDING = 2
# A finding whose quote is longer than this is not offered: cut to fit, it would be copied cut ("... each
# running `prefect deployment run citeflow-research/quot"), and the extractive floor states it whole.
QUOTE_SHOWN_CHARS = 400
_LINE = re.compile(r"^\s*(?:[-*\d.]+\s*)?\[?F(\d+)\]?\s*[:.)\]-]\s*(.+?)\s*$", re.IGNORECASE)
_TASK = (
    "You write a digest of what the sources report, from numbered findings. Each finding is one quote "
    "from a page, with how many pages state it. Write one line per finding you keep, in this exact form:\n"
    "F<number>: <one sentence stating that finding in the words of its quote>\n"
    "Start with the one or two findings most pages state. Keep every finding that answers the question, "
    "at most {most} lines; leave out findings about something else. Copy names and numbers exactly; add "
    "nothing the quote does not say. No other text, no headings, no citations: only the lines.\n"
    "Example:\nF2: The strike closed the port for nine days.\nF5: Fish prices rose during the strike."
)


def finding_lines(findings: list[Finding], max_chars: int) -> list[str]:
    """`F<n> (<pages> pages): <quote>` for as many findings as fit in `max_chars`, numbered from 1; a
    quote over QUOTE_SHOWN_CHARS is left out (its number with it)."""
    lines, used = [], 0
    for number, finding in enumerate(findings, start=1):
        quote = " ".join(finding.lead.claim.quote.split())
        if len(quote) > QUOTE_SHOWN_CHARS:
            continue
        line = f"F{number} ({len(finding.pages)} pages): {quote}"
        if used + len(line) + 1 > max_chars:
            break
        lines.append(line)
        used += len(line) + 1
    return lines


def digest_messages(question: str, findings: list[Finding], most: int, max_chars: int) -> list[Message]:
    """The prompt: the task, the question, and the findings that fit in `max_chars` characters."""
    system = {"role": "system", "content": f"{_TASK.format(most=most)}\n\n{UNTRUSTED_RULE}"}
    head = f"Question: {question}\n\nFindings:\n"
    room = max_chars - len(system["content"]) - len(head) - 200
    shown = untrusted("findings from verified quotes", "\n".join(finding_lines(findings, room)))
    return [system, {"role": "user", "content": head + shown}]


def parse_digest(text: str, findings: list[Finding], most: int) -> Draft:
    """The reply's `F<n>: sentence` lines as draft sentences citing finding n's pages; the first
    OPENING_FINDINGS lines open the report. ValueError, saying what was wrong, when no line is usable."""
    sentences: list[DraftSentence] = []
    seen: set[int] = set()
    for line in text.splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        number = int(match.group(1))
        if not 1 <= number <= len(findings) or number in seen:
            continue
        seen.add(number)
        finding = findings[number - 1]
        section = "" if len(sentences) < OPENING_FINDINGS else finding.section
        sentences.append(DraftSentence(text=match.group(2), cites=finding.pages, section=section))
        if len(sentences) == most:
            break
    if not sentences:
        raise ValueError(
            f"no line has the form 'F<number>: <sentence>' with a number from 1 to {len(findings)}; "
            "reply with those lines only"
        )
    return Draft(sentences=sentences)


class ModelDigestWriter:
    """The synthesiser model writing an open question's digest (see the module's docstring)."""

    def __init__(self, client: RoleClient, findings_max: int, max_chars: int) -> None:
        self.client = client
        self.findings_max = findings_max
        self.max_chars = max_chars

    def write(self, request: SynthesisInput) -> Draft:
        if request.previous is not None and request.critique is not None and request.critique.problems:
            # A revision drops what the critique flagged: asking again costs a call and may say less.
            flagged = {problem.index for problem in request.critique.problems}
            return Draft(sentences=[s for n, s in enumerate(request.previous.sentences) if n not in flagged])
        found = digest(request, self.findings_max * CANDIDATES_PER_FINDING, words_max=10**6)
        findings = found.opening + found.grouped
        if not findings:
            return Draft(sentences=[])
        messages = digest_messages(request.question, findings, self.findings_max, self.max_chars)
        try:
            return self.client.complete_read(
                messages, lambda reply: parse_digest(reply, findings, self.findings_max)
            )
        except ValueError as second:
            raise InvalidReply(
                self.client.subject,
                f"the digest reply had no usable line twice; last error: {second}",
                "the role falls back to its safe default",
            ) from None
