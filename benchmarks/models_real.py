"""A real small model in every role, on a few hotpotqa-100 questions, beside the extractive engine.

    /work/shared/tools/real_llm.sh 18080 qwen1.5b          # prints the server's PID; `kill PID` after
    .venv/bin/python benchmarks/models_real.py --base-url http://127.0.0.1:18080/v1 [--questions 3]

Loads the hotpotqa-100 corpus into a fresh store, runs the first questions with local search twice,
once with the extractive engine and once with the endpoint's one model (found at /v1/models) playing
planner, verifier, synthesiser and critic, and prints:
  per role: calls, replies that parse as the role's record, fallbacks to the extractive engine, claims
  proposed and kept (verifier; +extr: the extractive claims that filled each page's cap), tokens,
  seconds, and what the calls whose output the extractive engine replaced cost;
  per engine: the quality figures of `citeflow eval` (tasks/evaluation.py), sub-questions per run,
  summary sentences shipped, and shipped sentences that contradict a cited quote (must be 0).
Not a test: a CPU-served model takes minutes per question. Run it in the background.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from pydantic import BaseModel  # noqa: E402

from citeflow.contracts import ClaimStatus, Critique, Draft  # noqa: E402
from citeflow.llm.parsing import ReplyInvalid, parse_reply  # noqa: E402
from citeflow.llm.prompts import ClaimsReply, PlanReply, QueriesReply  # noqa: E402
from citeflow.roles import FALLBACK_STAGE_SUFFIX  # noqa: E402
from citeflow.verify import negation_conflict  # noqa: E402
from cli.common import prefect_api  # noqa: E402
from flows.evaluate import load_store, run_question  # noqa: E402
from storage.store import EvidenceStore, get_store  # noqa: E402
from tasks.evaluation import QuestionResult, load_questions, summarise  # noqa: E402

DEFAULT_EVAL = REPO.parent / "shared" / "eval"

REPLY_TYPES: dict[str, type[BaseModel]] = {
    "planner": PlanReply,
    "query_writer": QueriesReply,
    "verifier": ClaimsReply,
    "synthesiser": Draft,
    "critic": Critique,
}
ROLES = ("planner", "verifier", "synthesiser", "critic")
_VERIFY_DETAIL = re.compile(r"(\d+) claims proposed, (\d+) verified(?:.*extractive: (\d+) verified)?")
_PAGE_URL = re.compile(r"^Page URL: (\S+)$", re.MULTILINE)


def rows(store: EvidenceStore, sql: str, *params: object) -> list[tuple]:
    with store.cursor() as cur:
        return cur.execute(sql, list(params)).fetchall()


def parses(role: str, reply: str) -> bool:
    try:
        parse_reply(reply, REPLY_TYPES[role])
    except ReplyInvalid:
        return False
    return True


def role_figures(store: EvidenceStore, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Per role, summed over the runs: calls, parsing replies, fallbacks, tokens, seconds, and the cost
    of the calls whose output the extractive engine replaced."""
    figures: dict[str, dict[str, Any]] = {
        role: Counter({"calls": 0, "valid": 0, "fallbacks": 0}) for role in ROLES
    }
    for run_id in run_ids:
        calls = rows(
            store,
            "SELECT role, outcome, prompt_tokens, completion_tokens, latency_seconds, prompt, reply "
            "FROM model_calls WHERE run_id = ?",
            run_id,
        )
        fallbacks = [
            detail
            for (detail,) in rows(
                store,
                "SELECT detail FROM errors WHERE run_id = ? AND stage LIKE ?",
                run_id,
                f"%{FALLBACK_STAGE_SUFFIX}",
            )
        ]
        degraded_pages = {m.group(1) for d in fallbacks if (m := re.search(r"\((https?://\S+)\)", d))}
        degraded_roles = Counter(d.split(" ")[1] for d in fallbacks)
        for role, outcome, prompt_tokens, completion_tokens, seconds, prompt, reply in calls:
            counted = figures.setdefault(role, Counter())
            counted["calls"] += 1
            counted["failed_calls"] += outcome != "ok"
            counted["valid"] += outcome == "ok" and parses(role, reply)
            counted["prompt_tokens"] += prompt_tokens
            counted["completion_tokens"] += completion_tokens
            counted["seconds"] += seconds
            page = _PAGE_URL.search(prompt)
            replaced = (role == "verifier" and page is not None and page.group(1) in degraded_pages) or (
                role != "verifier" and degraded_roles[role] > 0
            )
            if replaced:
                counted["replaced_calls"] += 1
                counted["replaced_seconds"] += seconds
                counted["replaced_tokens"] += prompt_tokens + completion_tokens
        for role, count in degraded_roles.items():
            figures.setdefault(role, Counter())["fallbacks"] += count
        for (detail,) in rows(
            store, "SELECT detail FROM traces WHERE run_id = ? AND stage = 'verify'", run_id
        ):
            match = _VERIFY_DETAIL.search(detail)
            if match:
                figures["verifier"]["claims_proposed"] += int(match.group(1))
                figures["verifier"]["claims_kept"] += int(match.group(2))
                figures["verifier"]["claims_extractive"] += int(match.group(3) or 0)
    return {role: dict(counted) for role, counted in figures.items()}


def report_figures(store: EvidenceStore, run_ids: list[str]) -> dict[str, Any]:
    """Sub-questions per run, summary sentences shipped, and shipped sentences that contradict a quote."""
    contradictions = []
    sentences: list[tuple[str, str]] = []  # (section, text) of every shipped sentence
    for run_id in run_ids:
        quotes = defaultdict(list)
        for claim in store.claims(run_id, ClaimStatus.verified):
            quotes[claim.source_id].append(claim.quote)
        shipped = rows(
            store,
            "SELECT section, text, cites FROM report_sentences WHERE run_id = ? AND status = 'kept'",
            run_id,
        )
        for section, text, cites in shipped:
            sentences.append((section, text))
            if negation_conflict(text, [quote for cite in cites for quote in quotes[cite]]):
                contradictions.append(text)
    runs = [rows(store, "SELECT status, metrics FROM runs WHERE run_id = ?", run_id)[0] for run_id in run_ids]
    return {
        "subquestions_per_run": [
            rows(store, "SELECT count(*) FROM subquestions WHERE run_id = ?", run_id)[0][0]
            for run_id in run_ids
        ],
        "summary_sentences": sum(1 for section, _ in sentences if section == ""),
        "sentences": len(sentences),
        "statuses": dict(Counter(status for status, _ in runs)),
        "degradations": sum(json.loads(metrics or "{}").get("degradations", 0) for _, metrics in runs),
        "contradicting_sentences": len(contradictions),
    }


def quality(results: list[QuestionResult], store: EvidenceStore) -> dict[str, Any]:
    """The eval's figures for these runs, and report_figures'."""
    summary = summarise(results).model_dump()
    return summary | report_figures(store, [result.run_id for result in results if result.run_id])


def print_tables(roles: dict[str, dict[str, Any]], quality: dict[str, dict[str, Any]]) -> None:
    print("\nPer role (model run):")
    header = (
        f"{'role':<12} {'calls':>5} {'valid':>5} {'fallbk':>6} {'proposed':>8} {'kept':>5} {'+extr':>5} "
        f"{'tok in':>8} {'tok out':>7} {'seconds':>8} {'replaced: calls':>15} {'s':>7} {'tokens':>7}"
    )
    print(header)
    for role in ROLES:
        f = roles.get(role, {})
        cells = [
            f"{role:<12}",
            f"{f.get('calls', 0):>5}",
            f"{f.get('valid', 0):>5}",
            f"{f.get('fallbacks', 0):>6}",
            f"{f.get('claims_proposed', '-'):>8}",
            f"{f.get('claims_kept', '-'):>5}",
            f"{f.get('claims_extractive', '-'):>5}",
            f"{f.get('prompt_tokens', 0):>8}",
            f"{f.get('completion_tokens', 0):>7}",
            f"{f.get('seconds', 0.0):>8.0f}",
            f"{f.get('replaced_calls', 0):>15}",
            f"{f.get('replaced_seconds', 0.0):>7.0f}",
            f"{f.get('replaced_tokens', 0):>7}",
        ]
        print(" ".join(cells))
    print("\nQuality, same questions:")
    keys = [
        "evidence_recall_strict",
        "evidence_recall_lenient",
        "answer_recall",
        "supporting_page_recall",
        "citation_precision",
        "integrity_problems",
        "contradicting_sentences",
        "summary_sentences",
        "sentences",
        "subquestions_per_run",
        "statuses",
        "degradations",
        "answered_agreement",
        "seconds_mean",
        "model_calls_mean",
        "tokens_mean",
    ]
    print(f"{'figure':<26} {'extractive':>22} {'model':>22}")
    for key in keys:
        print(f"{key:<26} {str(quality['extractive'].get(key)):>22} {str(quality['model'].get(key)):>22}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base-url", default="http://127.0.0.1:18080/v1", help="the model server")
    parser.add_argument("--eval", type=Path, default=DEFAULT_EVAL, help="folder with hotpotqa-100.*.jsonl")
    parser.add_argument("--questions", type=int, default=3, help="how many questions, from the first")
    parser.add_argument("--context-tokens", type=int, default=4096, help="the server's context window")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per call (CPU: minutes)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here too")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="citeflow-models-real-"))
    db = load_store(args.eval / "hotpotqa-100.corpus.jsonl", folder)
    print(f"store: {db} (query it with citeflow sql --db once this ends)", file=sys.stderr)
    questions = load_questions(args.eval / "hotpotqa-100.questions.jsonl", args.questions)
    # No model name: the endpoint's one model, from /v1/models.
    models = {
        "defaults.base_url": args.base_url,
        "defaults.context_tokens": args.context_tokens,
        "defaults.timeout_seconds": args.timeout,
        "defaults.max_attempts": 2,
        "defaults.max_output_tokens": 512,
        "synthesiser.max_output_tokens": 1024,
    }
    reports = folder / "reports"
    with prefect_api(db):
        extractive = [run_question(q, db, reports, None, {}, expected_answered=True) for q in questions]
        modelled = [run_question(q, db, reports, None, models, expected_answered=True) for q in questions]
    store = get_store(db)
    figures = {"extractive": quality(extractive, store), "model": quality(modelled, store)}
    roles = role_figures(store, [result.run_id for result in modelled if result.run_id])
    print_tables(roles, figures)
    result = {"questions": [q.question for q in questions], "roles": roles, "quality": figures}
    print(json.dumps(result, indent=2, default=str))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
