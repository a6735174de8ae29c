"""An OpenAI-compatible server on 127.0.0.1 that answers each request by the role it comes from.

Roles are told apart by the response_format schema each one asks for, so the order in which concurrent
verify tasks reach the server does not matter. The default handlers are faithful: the verifier quotes a
page's first sentences exactly, the synthesiser writes each claim's own words, the critic approves. The
planner's follow-up call (a role of its own here, "follow-up") proposes none. A
test replaces one role's handler to script a misbehaviour; `delay` slows every reply down.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from openai_server import EVIDENCE_LINE, UNTRUSTED_BLOCK, Received, Reply, ScriptedServer, json_reply, role_of

from citeflow.text import split_sentences
from storage.ingest import ingest_paths
from storage.store import get_store

QUESTION = "Who founded Acme Corp and what does it make?"
PAGES = [
    {
        "url": "https://example.org/acme-history",
        "title": "Acme Corp history",
        "text": "Acme Corp was founded by Jane Doe in 1947 in Ohio. "
        "The company first made anvils for farms near Dayton. It moved its works to Arizona in 1962.",
    },
    {
        "url": "https://example.org/acme-products",
        "title": "Acme Corp products",
        "text": "Acme Corp sells anvils, rockets and giant magnets to customers worldwide. "
        "Its rocket skates were launched in 1958 and sold widely. The magnets are made in Tucson.",
    },
]

PLAN = {
    "subquestions": [
        {"text": "Who founded Acme Corp?", "query": "Acme Corp founded history"},
        {"text": "What does Acme Corp make?", "query": "Acme Corp products anvils rockets"},
    ]
}

Handler = Callable[[Received, int], Reply]  # (request, how many calls of this role came before) -> reply


def blocks(received: Received, label: str) -> list[str]:
    """The insides of the untrusted blocks with `label` in the request's messages."""
    return [m.group(3) for m in UNTRUSTED_BLOCK.finditer(received.prompt) if m.group(2) == label]


def evidence(received: Received) -> list[tuple[str, str, str]]:
    """(source id, sub-question id, claim text) of each claim a synthesiser or critic was shown."""
    (block,) = blocks(received, "verified claims and their quotes")
    return EVIDENCE_LINE.findall(block)


def plan_reply(received: Received, n: int) -> Reply:
    return json_reply(PLAN)


def first_sentences(received: Received, n: int) -> Reply:
    """A faithful verifier: the page's first two sentences, quoted exactly."""
    (text,) = blocks(received, "page text")
    sentences = [span.text for span in split_sentences(text)][:2]
    return json_reply({"claims": [{"text": s, "quote": s} for s in sentences]})


def failing_checks_on(word: str) -> Handler:
    """A verifier whose replies are well-formed but, for a page whose text holds `word`, quote what the
    page does not say, so every claim fails the checks; the same prompt always gets the same reply, as
    from a real model at temperature 0."""

    def reply(received: Received, n: int) -> Reply:
        (text,) = blocks(received, "page text")
        if word not in text:
            return first_sentences(received, n)
        invented = "Acme Corp was founded on the Moon by a committee of robots in 1801."
        return json_reply({"claims": [{"text": invented, "quote": invented}]})

    return reply


def one_sentence_per_claim(received: Received, n: int) -> Reply:
    """A faithful synthesiser: each claim's own words, citing its source, in its section."""
    return json_reply(
        {
            "sentences": [
                {"text": text, "cites": [sid], "section": qid} for sid, qid, text in evidence(received)
            ]
        }
    )


FINDING_LINE = re.compile(r"^F(\d+) \(\d+ pages\): (.+)$", re.MULTILINE)


def every_finding(received: Received, n: int) -> Reply:
    """A faithful digest writer: each finding it was shown, in its quote's words, one a line."""
    (block,) = blocks(received, "findings from verified quotes")
    return Reply(content="\n".join(f"F{number}: {quote}" for number, quote in FINDING_LINE.findall(block)))


def no_follow_ups(received: Received, n: int) -> Reply:
    """The planner's follow-up call: the two Acme pages leave nothing to follow."""
    return json_reply({"subquestions": []})


def approve(received: Received, n: int) -> Reply:
    return json_reply({"approved": True, "notes": "every sentence is supported", "problems": []})


class RoleServer(ScriptedServer):
    """The scripted server, answering each request with its role's handler instead of a queue.

    Every 200 reply carries usage figures sized like the request and reply (4 characters a token),
    and the figures sent are kept, so a test can compare them with what the run recorded."""

    def __init__(self, delay: float = 0.0, **options: Any) -> None:
        super().__init__(**options)
        self.delay = delay
        self.handlers: dict[str, Handler] = {
            "planner": plan_reply,
            "follow-up": no_follow_ups,
            "verifier": first_sentences,
            "synthesiser": one_sentence_per_claim,
            "digest": every_finding,
            "critic": approve,
        }
        self.usage_sent: list[tuple[int, int]] = []
        self.calls: Counter[str] = Counter()
        self._dispatch_lock = threading.Lock()

    def answer(self, received: Received) -> Reply:
        role = role_of(received)
        with self._dispatch_lock:  # a handler may count its calls; keep the count per role exact
            n = self.calls[role]
            self.calls[role] += 1
        handler = self.handlers.get(role)
        reply = handler(received, n) if handler else Reply(status=400, error=f"unknown role {role}")
        if reply.status == 200 and reply.usage is not None and not reply.drop:
            usage = (len(received.prompt) // 4 + 1, len(reply.content) // 4 + 1)
            reply = replace(reply, usage=usage)
            with self._dispatch_lock:
                self.usage_sent.append(usage)
        return replace(reply, delay=reply.delay + self.delay)

    def of(self, role: str) -> list[Received]:
        return [r for r in self.requests if role_of(r) == role]


def models_for(server: RoleServer, **defaults: Any) -> dict[str, Any]:
    """Every role on `server`, as dotted settings; `defaults` are more [defaults] values."""
    given = {"base_url": server.url, "model": "test-model", "max_attempts": 2, **defaults}
    return {f"defaults.{name}": value for name, value in given.items()} | {
        "models.backoff_seconds": 0.01,
        "models.backoff_max_seconds": 0.05,
    }


def ingested(folder: Path, pages: list[dict[str, str]], name: str = "acme") -> Path:
    """A fresh store `name`.duckdb in `folder` holding `pages`, loaded as `citeflow ingest` loads a JSON
    Lines file."""
    corpus = folder / f"{name}.jsonl"
    corpus.write_text("".join(json.dumps(page) + "\n" for page in pages), encoding="utf-8")
    db = folder / f"{name}.duckdb"
    ingest_paths(get_store(db), [corpus])
    return db
