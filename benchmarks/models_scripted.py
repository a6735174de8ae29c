"""Cost and rejection figures of a run with every role on a model, against a deterministic scripted model.

    .venv/bin/python benchmarks/models_scripted.py [--limit 10] [--out figures.json]

Starts the scripted OpenAI-compatible server of tests/openai_server.py on 127.0.0.1, loads the
hotpotqa-100 corpus into a fresh store and runs the first questions through the Prefect flow with local
search and every role on the scripted "model":
  planner      the question split naively at "and", commas and "?"; each part is its own query;
  verifier     two claims per page: the page sentence sharing most words with the sub-question, quoted
               exactly, and the next best with two adjacent words swapped (a slip a model makes);
  synthesiser  one sentence per verified claim, in the claim's words, citing its source;
  critic       approves.
The server reports usage as a real one would, about four characters a token of prompt and reply, so
the token figures are the size of what the flow sends and receives, not a model's billing. Prints model
calls and prompt/completion tokens per question, and the share of claims the mechanical checks rejected.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from openai_server import EVIDENCE_LINE, UNTRUSTED_BLOCK, Received, Reply, ScriptedServer, json_reply, role_of  # noqa: E402

from citeflow.contracts import ClaimStatus, Report  # noqa: E402
from citeflow.text import content_words, split_sentences  # noqa: E402
from storage.store import get_store  # noqa: E402
from tasks.evaluation import load_questions  # noqa: E402

DEFAULT_EVAL = REPO.parent / "shared" / "eval"


def run_questions(questions: list[str], db: Path, models: dict[str, Any]) -> list[tuple[Report, float]]:
    """Each question through the flow with the scripted model, with its wall seconds."""
    from flows.research import report_of, research_flow

    results = []
    for question in questions:
        started = time.perf_counter()
        state = research_flow(
            question=question,
            settings={**models, "db": str(db), "reports": str(db.parent / "reports")},
            return_state=True,
        )
        report = report_of(state)
        if not isinstance(report, Report):
            raise SystemExit(f"{question!r} crashed: {state.message}")
        results.append((report, time.perf_counter() - started))
    return results


def block(received: Received, label: str) -> str:
    """The inside of the request's one untrusted block with `label`."""
    (inside,) = [m.group(3) for m in UNTRUSTED_BLOCK.finditer(received.prompt) if m.group(2) == label]
    return inside


def user_line(received: Received, prefix: str) -> str:
    """The text after `prefix` on the user message's line that starts with it."""
    user = received.body["messages"][-1]["content"]
    return next(line.removeprefix(prefix) for line in user.splitlines() if line.startswith(prefix))


def swap_two_words(sentence: str) -> str:
    """The sentence with its two middle words swapped: no longer a verbatim quote of the page."""
    tokens = sentence.split(" ")
    if len(tokens) < 3:
        return f"{sentence} indeed"
    middle = len(tokens) // 2
    tokens[middle - 1], tokens[middle] = tokens[middle], tokens[middle - 1]
    return " ".join(tokens)


class ScriptedModel:
    """Plays every role deterministically from what each request shows it."""

    def plan(self, received: Received) -> dict[str, Any]:
        question = user_line(received, "Question: ")
        parts = [part.strip() for part in re.split(r"\band\b|,|\?", question) if len(part.strip()) >= 3]
        return {"subquestions": [{"text": part, "query": part} for part in parts or [question]]}

    def verify(self, received: Received) -> dict[str, Any]:
        subquestion = set(content_words(user_line(received, "Sub-question: ")))
        sentences = [span.text for span in split_sentences(block(received, "page text"))]
        ranked = sorted(sentences, key=lambda s: -len(subquestion & set(content_words(s))))
        exact = ranked[0]
        altered = swap_two_words(ranked[1] if len(ranked) > 1 else exact)
        return {"claims": [{"text": exact, "quote": exact}, {"text": altered, "quote": altered}]}

    def synthesise(self, received: Received) -> dict[str, Any]:
        claims = EVIDENCE_LINE.findall(block(received, "verified claims and their quotes"))
        return {"sentences": [{"text": text, "cites": [sid], "section": qid} for sid, qid, text in claims]}

    def critique(self, received: Received) -> dict[str, Any]:
        return {"approved": True, "notes": "every sentence is supported", "problems": []}


class ModelServer(ScriptedServer):
    """The scripted server answering each request as the scripted model would for its role."""

    def __init__(self, model: ScriptedModel) -> None:
        super().__init__()
        self.model = model

    def answer(self, received: Received) -> Reply:
        role = role_of(received)
        answer = {
            "planner": self.model.plan,
            "verifier": self.model.verify,
            "synthesiser": self.model.synthesise,
            "critic": self.model.critique,
        }.get(role)
        if answer is None:
            return Reply(status=400, error=f"the scripted model plays no {role} role")
        reply = json_reply(answer(received))
        return replace(reply, usage=(len(received.prompt) // 4 + 1, len(reply.content) // 4 + 1))


def figures(results: list[tuple[Report, float]], db: Path) -> dict[str, Any]:
    store = get_store(db)
    reports = [report for report, _ in results]
    seconds = [seconds for _, seconds in results]
    claims = [claim for report in reports for claim in store.claims(report.run_id)]
    rejected = [claim for claim in claims if claim.status is ClaimStatus.rejected]
    # The scripted verifier proposes the exact quote first (C<page>.1) and the altered one second (.2).
    exact = [claim for claim in claims if claim.id.endswith(".1")]
    altered = [claim for claim in claims if claim.id.endswith(".2")]
    roles: Counter[str] = Counter()
    for report in reports:
        roles.update({role: usage.calls for role, usage in store.role_usage(report.run_id).items()})
    return {
        "questions": len(reports),
        "statuses": dict(Counter(report.status.value for report in reports)),
        "mean_seconds": round(statistics.mean(seconds), 2),
        "model_calls_per_question": statistics.mean(r.metrics.model_calls for r in reports),
        "model_calls_min_max": [
            min(r.metrics.model_calls for r in reports),
            max(r.metrics.model_calls for r in reports),
        ],
        "calls_per_question_by_role": {role: count / len(reports) for role, count in sorted(roles.items())},
        "prompt_tokens_per_question": statistics.mean(r.metrics.tokens_in for r in reports),
        "completion_tokens_per_question": statistics.mean(r.metrics.tokens_out for r in reports),
        "claims": len(claims),
        "claims_rejected": len(rejected),
        "rejected_share": round(len(rejected) / len(claims), 3) if claims else 0.0,
        "rejection_reasons": dict(Counter(claim.reason.split(":")[0] for claim in rejected).most_common()),
        "exact_quotes_kept": [sum(c.status is ClaimStatus.verified for c in exact), len(exact)],
        "altered_quotes_rejected": [sum(c.status is ClaimStatus.rejected for c in altered), len(altered)],
        "per_question": [
            {
                "model_calls": r.metrics.model_calls,
                "prompt_tokens": r.metrics.tokens_in,
                "completion_tokens": r.metrics.tokens_out,
            }
            for r in reports
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--eval", type=Path, default=DEFAULT_EVAL, help="folder with hotpotqa-100.*.jsonl")
    parser.add_argument("--limit", type=int, default=10, help="how many questions, from the first")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here too")
    args = parser.parse_args()
    from flows.evaluate import load_store

    db = load_store(
        args.eval / "hotpotqa-100.corpus.jsonl", Path(tempfile.mkdtemp(prefix="citeflow-models-"))
    )
    questions = [q.question for q in load_questions(args.eval / "hotpotqa-100.questions.jsonl", args.limit)]
    with ModelServer(ScriptedModel()) as server:
        every_role = {"defaults.base_url": server.url, "defaults.model": "scripted"}
        results = run_questions(questions, db, every_role)
    result = figures(results, db)
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
