"""The last mechanical check of a run: every citation traces to a verified quote on a page the run read.

Run by the finish step on every report, and by the tests and the evaluation, against what the store
holds rather than what the stages passed along.
"""

from __future__ import annotations

from citeflow.contracts import ClaimStatus, Report
from citeflow.text import normalise
from storage.store import EvidenceStore


def audit(store: EvidenceStore, report: Report) -> list[str]:
    """Problems found, one line each; an empty list means the report is sound."""
    problems: list[str] = []
    read = {source.page_id: source.source_id for source in store.run_sources(report.run_id)}
    verified = store.claims(report.run_id, ClaimStatus.verified)
    cited_by_claims = {claim.source_id for claim in verified}
    pages = {page_id: store.get_page(page_id) for page_id in {claim.page_id for claim in verified}}
    for claim in verified:
        page = pages[claim.page_id]
        if claim.page_id not in read:
            problems.append(f"claim {claim.id} comes from page {claim.page_id}, which the run never read")
        if page.content_hash != claim.page_hash:
            problems.append(f"claim {claim.id} was checked against another version of page {claim.page_id}")
        if claim.quote_start is None or claim.quote_end is None:
            problems.append(f"claim {claim.id} is verified but has no quote offsets")
            continue
        found = page.text[claim.quote_start : claim.quote_end]
        if normalise(found) != normalise(claim.quote):
            problems.append(
                f"claim {claim.id}: its quote is not at offsets {claim.quote_start}-{claim.quote_end}"
            )
    for sentence in report.sentences:
        problems += [
            f"sentence {sentence.position} cites {cite}, which is not the source of a verified claim"
            for cite in sentence.cites
            if cite not in cited_by_claims
        ]
    return problems
