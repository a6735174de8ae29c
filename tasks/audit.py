"""Mechanical checks of a finished report, against what the store holds rather than what the stages
passed along.

`audit`: the last check of a run, that every citation traces to a verified quote on a page the run read;
run by the finish step on every report, and by the tests and the evaluation. `audit_run`: a past report
checked again, sentence by sentence, for `citeflow audit`.
"""

from __future__ import annotations

from pydantic import BaseModel

from citeflow.checks import claims_by_source, classify
from citeflow.contracts import (
    Claim,
    ClaimStatus,
    DraftSentence,
    Page,
    Report,
    SentenceCheck,
    SentenceStatus,
)
from citeflow.errors import StoreError
from citeflow.text import normalise
from citeflow.verify import find_quote
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


class SentenceAudit(BaseModel):
    """One kept sentence of a past report, checked again: what failed, nothing when it holds."""

    position: int
    text: str
    cites: list[str]
    problems: list[str]


class RunAudit(BaseModel):
    """A past report checked again (`audit_run`): each sentence, and the claims no longer supported."""

    run_id: str
    sentences: list[SentenceAudit]
    unsupported_claims: list[str]  # one line each: the claim, its page and why
    problems: list[str]  # about the run as a whole: no report, nothing to check

    @property
    def sound(self) -> bool:
        return not (self.problems or self.unsupported_claims or any(s.problems for s in self.sentences))


def claim_problem(claim: Claim, page: Page | None, latest: bool) -> str:
    """Why `page` does not support `claim`, or '' when it does. Against the exact version cited (not
    `latest`): the page's content hash and the quote at its offsets; against the newest version of its
    address: the quote anywhere in its text."""
    if page is None:
        return f"page {claim.page_id} is not in the store"
    if latest:
        if find_quote(page.text, claim.quote) is None:
            return f"the newest version of {page.url} (page {page.id}) no longer holds its quote"
        return ""
    if page.content_hash != claim.page_hash:
        return f"page {page.id} holds another version than the one checked (content hash differs)"
    if claim.quote_start is None or claim.quote_end is None:
        return "it has no quote offsets"
    if normalise(page.text[claim.quote_start : claim.quote_end]) != normalise(claim.quote):
        return f"its quote is not at offsets {claim.quote_start}-{claim.quote_end} of page {page.id}"
    return ""


def _page(store: EvidenceStore, claim: Claim, latest: bool) -> Page | None:
    try:
        page = store.get_page(claim.page_id)
    except StoreError:
        return None
    return store.latest_page(page.url) if latest else page


def audit_run(store: EvidenceStore, run_id: str, latest: bool = False) -> RunAudit:
    """Re-verify the report of a past run from what the store holds: each verified claim it cites
    against the exact page version it was checked against (or, `latest`, against the newest version
    of that page's address), and each kept sentence by the mechanical sentence checks over the claims
    that still hold. Reads only columns every schema version has, so runs of earlier citeflow versions
    are audited alike."""
    kept = [s for s in store.report_sentences(run_id) if s.status is SentenceStatus.kept]
    verified = store.claims(run_id, ClaimStatus.verified)
    if not kept:
        why = "no claim was verified" if not verified else "its report has no kept sentence"
        return RunAudit(run_id=run_id, sentences=[], unsupported_claims=[], problems=[
            f"run {run_id} has no report to audit in this store ({why})"
        ])  # fmt: skip
    cited = {cite for sentence in kept for cite in sentence.cites}
    holding: list[Claim] = []
    unsupported: dict[str, str] = {}  # claim id -> the line saying why
    for claim in verified:
        if claim.source_id not in cited:
            continue
        why = claim_problem(claim, _page(store, claim, latest), latest)
        if why:
            unsupported[claim.id] = f"claim {claim.id} ({claim.source_id}): {why}: {claim.text}"
        else:
            holding.append(claim)
    grouped = claims_by_source(holding)
    audited = []
    for sentence in kept:
        problems = [
            f"cites claim {claim.id}, which no longer holds"
            for claim in verified
            if claim.id in unsupported and claim.source_id in sentence.cites
        ]
        # A source whose claims all failed is said above; the sentence checks judge what is left of it.
        lost = {cite for cite in sentence.cites if cite not in grouped and problems}
        standing = [cite for cite in sentence.cites if cite not in lost]
        if standing or not lost:
            draft = DraftSentence(text=sentence.text, cites=standing, section=sentence.section)
            check, detail = classify(draft, grouped)
            if check is not SentenceCheck.ok:
                problems.append(f"{check.value}: {detail}" if detail else check.value)
        audited.append(
            SentenceAudit(
                position=sentence.position, text=sentence.text, cites=sentence.cites, problems=problems
            )
        )
    return RunAudit(
        run_id=run_id, sentences=audited, unsupported_claims=list(unsupported.values()), problems=[]
    )
