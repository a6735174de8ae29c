"""How Caps.claim_support_min separates claims that restate their quote from claims that do not, measured
on ../shared/eval/hotpotqa-100 (and, given a store, on a real model's claims).

    .venv/bin/python benchmarks/claim_support.py [--db STORE_OF_A_MODEL_RUN]

A claim's support is the share of its content words (stemmed) found in its quote (citeflow/verify.py
`content_support`). Names and numbers are checked apart, so every pair measured here already passes that
check, as the claims the issue found did. Prints, per threshold, the share that would pass of:
  wrong sentence: a corpus sentence as the claim, another sentence of the same page as its quote (a
                  model citing the wrong sentence of the right page);
  instruction:    a sentence of citeflow's own prompts as the claim, any corpus sentence as its quote;
  model claims:   (with --db) the verifier's claims whose quote was found on the page and whose text is
                  not the quote itself, from a run with a real model (benchmarks/models_real.py).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from citeflow.llm import prompts  # noqa: E402
from citeflow.text import normalise, prose_sentences, split_sentences  # noqa: E402
from citeflow.verify import content_support, unsupported_details  # noqa: E402
from storage.store import EvidenceStore  # noqa: E402

DEFAULT_EVAL = REPO.parent / "shared" / "eval"
THRESHOLDS = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
PAIRS_MAX = 20_000


def passing(shares: list[float]) -> dict[str, float]:
    return (
        {f"{t:.1f}": round(sum(s >= t for s in shares) / len(shares), 3) for t in THRESHOLDS}
        if shares
        else {}
    )


def corpus_sentences(eval_dir: Path) -> list[list[str]]:
    pages = []
    for line in (eval_dir / "hotpotqa-100.corpus.jsonl").read_text(encoding="utf-8").splitlines():
        text = json.loads(line)["text"]
        pages.append([span.text for span in prose_sentences(text, 20)])
    return pages


def wrong_sentence_shares(pages: list[list[str]]) -> list[float]:
    shares = []
    for sentences in pages:
        for i, claim in enumerate(sentences):
            for j, quote in enumerate(sentences):
                if i != j and not unsupported_details(claim, quote):
                    shares.append(content_support(claim, quote)[0])
    return shares


def instruction_shares(pages: list[list[str]], rng: random.Random) -> list[float]:
    text = " ".join(
        m["content"]
        for builder in (
            lambda: prompts.planner_messages("q", 3, 5),
            lambda: prompts.query_messages("q", ["a"]),
        )
        for m in builder()
    )
    text += " " + prompts.UNTRUSTED_RULE + " " + prompts._verifier_task(3)
    instructions = [span.text for span in split_sentences(text) if len(normalise(span.text)) >= 20]
    quotes = [sentence for sentences in pages for sentence in sentences]
    shares = []
    for claim in instructions:
        for quote in rng.sample(quotes, min(len(quotes), PAIRS_MAX // max(len(instructions), 1))):
            if not unsupported_details(claim, quote):
                shares.append(content_support(claim, quote)[0])
    return shares


def model_claim_shares(db: Path) -> tuple[list[float], list[tuple[float, str, str]]]:
    store = EvidenceStore.open(db, read_only=True)
    try:
        with store.cursor() as cur:
            claims = cur.execute(
                "SELECT c.text, c.quote, p.title FROM claims c JOIN runs r USING (run_id) "
                "JOIN pages p ON p.id = c.page_id WHERE r.engine <> 'extractive' "
                "AND c.reason NOT IN ('quote not found in page text', 'empty claim') "
                "AND c.reason NOT LIKE 'quote shorter%' AND c.reason NOT LIKE 'duplicate%'"
            ).fetchall()
    finally:
        store.close()
    measured = [
        (content_support(text, quote, title)[0], text, quote)  # as verify.check_claim measures it
        for text, quote, title in claims
        if normalise(text).casefold() != normalise(quote).casefold()
    ]
    return [share for share, _, _ in measured], sorted(measured)[:15]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--eval", type=Path, default=DEFAULT_EVAL)
    parser.add_argument("--db", type=Path, help="a store holding runs with a model verifier")
    args = parser.parse_args()
    pages = corpus_sentences(args.eval)
    wrong = wrong_sentence_shares(pages)
    lifted = instruction_shares(pages, random.Random(14))
    result: dict[str, object] = {
        "wrong_sentence": {"pairs": len(wrong), "passing_at": passing(wrong)},
        "instruction": {"pairs": len(lifted), "passing_at": passing(lifted)},
    }
    if args.db:
        shares, lowest = model_claim_shares(args.db)
        result["model_claims"] = {"claims": len(shares), "passing_at": passing(shares)}
        result["model_claims_lowest"] = [
            {"share": round(share, 2), "text": text, "quote": quote} for share, text, quote in lowest
        ]
    print(json.dumps(result, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
