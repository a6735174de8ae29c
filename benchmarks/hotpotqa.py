"""Evaluate citeflow on ../shared/eval/hotpotqa-100 with the scoring of its README, and print the figures.

    .venv/bin/python benchmarks/hotpotqa.py [--limit N] [--out results.json]

Loads the corpus into a fresh evidence store, runs every question with local search through the Prefect
flow, and only then reads the answers and gold evidence to score. Prints evidence recall, supporting-page
recall, citation precision, answer recall, integrity, and cost per question.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import string
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from citeflow.contracts import Report  # noqa: E402
from storage.ingest import ingest_paths  # noqa: E402
from storage.store import get_store  # noqa: E402
from tasks.audit import audit  # noqa: E402

DEFAULT_EVAL = REPO.parent / "shared" / "eval"


def tokens(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.casefold()))


def covers(quote: str, gold: str) -> bool:
    """The README's rule: they share at least half of the shorter one's word tokens, case-folded."""
    a, b = tokens(quote), tokens(gold)
    return bool(a and b) and len(a & b) >= 0.5 * min(len(a), len(b))


def plain(text: str) -> str:
    return " ".join(text.casefold().translate(str.maketrans("", "", string.punctuation)).split())


def load_corpus(eval_dir: Path) -> Path:
    """A fresh evidence store in a temporary folder, holding the corpus; returns its path."""
    db = Path(tempfile.mkdtemp(prefix="citeflow-eval-")) / "eval.duckdb"
    started = time.perf_counter()
    ingest_paths(get_store(db), [eval_dir / "hotpotqa-100.corpus.jsonl"])
    print(f"ingested the corpus in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    return db


def question_records(eval_dir: Path, limit: int) -> list[dict[str, Any]]:
    lines = (eval_dir / "hotpotqa-100.questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines[:limit]]


def run_questions(
    questions: list[str], db: Path, settings: dict[str, Any] | None = None
) -> list[tuple[Report, float]]:
    """Each question through the flow, with its wall seconds; `settings` by dotted name, as the flow
    takes them."""
    from flows.research import research_flow

    reports = db.parent / "reports"
    results = []
    for n, question in enumerate(questions, start=1):
        started = time.perf_counter()
        chosen = {"db": str(db), "reports": str(reports), **(settings or {})}
        state = research_flow(question=question, settings=chosen, return_state=True)
        report = state.result(raise_on_failure=False)
        seconds = time.perf_counter() - started
        if not isinstance(report, Report):
            raise SystemExit(f"question {n} crashed: {state.message}")
        results.append((report, seconds))
        print(
            f"[{n}/{len(questions)}] {seconds:.1f}s {report.status.value} {len(report.claims)} claims, "
            f"{report.metrics.model_calls} model calls",
            file=sys.stderr,
        )
    return results


def score(gold: list[dict], results: list[tuple[Report, float]], db: Path) -> dict[str, float]:
    store = get_store(db)
    sentences_total = sentences_covered = pages_total = pages_cited = cited_total = cited_gold = answered = 0
    integrity = 0
    for record, (report, _) in zip(gold, results, strict=True):
        quotes = [claim.quote for claim in report.claims]
        for support in record["supporting"]:
            sentences_total += 1
            sentences_covered += any(covers(quote, support["text"]) for quote in quotes)
        gold_urls = {support["url"] for support in record["supporting"]}
        cited_urls = {source.url for source in report.sources}
        pages_total += len(gold_urls)
        pages_cited += len(gold_urls & cited_urls)
        cited_total += len(cited_urls)
        cited_gold += len(cited_urls & gold_urls)
        body = plain(" ".join(sentence.text for sentence in report.sentences))
        answered += any(plain(answer) and plain(answer) in body for answer in record["answers"])
        integrity += len(audit(store, report))
    seconds = [seconds for _, seconds in results]
    return {
        "questions": len(results),
        "evidence_recall": round(sentences_covered / sentences_total, 3),
        "supporting_page_recall": round(pages_cited / pages_total, 3),
        "citation_precision": round(cited_gold / cited_total, 3) if cited_total else 0.0,
        "answer_recall": round(answered / len(results), 3),
        "integrity_problems": integrity,
        "median_seconds": round(statistics.median(seconds), 2),
        "mean_seconds": round(statistics.mean(seconds), 2),
        "model_calls_per_question": statistics.mean(r.metrics.model_calls for r, _ in results),
        "tokens_per_question": statistics.mean(
            r.metrics.tokens_in + r.metrics.tokens_out for r, _ in results
        ),
        "claims_per_question": round(statistics.mean(len(r.claims) for r, _ in results), 1),
        "sources_per_question": round(statistics.mean(len(r.sources) for r, _ in results), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--eval", type=Path, default=DEFAULT_EVAL, help="folder with hotpotqa-100.*.jsonl")
    parser.add_argument("--limit", type=int, default=100, help="how many questions, from the first")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here too")
    args = parser.parse_args()
    db = load_corpus(args.eval)
    records = question_records(args.eval, args.limit)
    # The runs see only the questions; answers and gold evidence are read afterwards, to score.
    results = run_questions([record["question"] for record in records], db)
    figures = score(records, results, db)
    print(json.dumps(figures, indent=2))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
