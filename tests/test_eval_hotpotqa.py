"""Ten questions of ../shared/eval/hotpotqa-100 through the real flow: every citation maps to a verified
claim whose quote is in the text of the page it cites, as stored in `pages`."""

from __future__ import annotations

import json
from pathlib import Path

from citeflow.contracts import ClaimStatus, Report, RunStatus
from citeflow.text import normalise
from storage.ingest import ingest_paths
from storage.store import get_store
from tasks.audit import audit


def test_ten_hotpotqa_questions_cite_only_verified_quotes_found_in_their_pages(
    prefect_api: None, eval_dir: Path, tmp_path: Path
) -> None:
    from flows.research import research_flow

    db = tmp_path / "hotpotqa.duckdb"
    store = get_store(db)
    ingest_paths(store, [eval_dir / "hotpotqa-100.corpus.jsonl"])
    lines = (eval_dir / "hotpotqa-100.questions.jsonl").read_text(encoding="utf-8").splitlines()[:10]
    questions = [json.loads(line)["question"] for line in lines]

    reports = [
        research_flow(question=q, settings={"db": str(db), "reports": str(tmp_path / "reports")})
        for q in questions
    ]

    for report in reports:
        assert isinstance(report, Report) and report.status is not RunStatus.failed
        assert audit(store, report) == []
        verified = {claim.id: claim for claim in store.claims(report.run_id, ClaimStatus.verified)}
        by_source: dict[str, list[str]] = {}
        for claim in verified.values():
            by_source.setdefault(claim.source_id or "", []).append(claim.id)
        assert report.sentences
        for sentence in report.sentences:
            for cite in sentence.cites:
                assert by_source.get(cite), f"{report.question}: {cite} is not the source of a verified claim"
                for claim_id in by_source[cite]:
                    claim = verified[claim_id]
                    page = store.get_page(claim.page_id)
                    assert normalise(claim.quote) in normalise(page.text)
                    assert page.text[claim.quote_start : claim.quote_end] == claim.quote
