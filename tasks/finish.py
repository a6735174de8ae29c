"""Finish: the report in Markdown with its bibliography, and what failed or is missing, plainly."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from citeflow.contracts import (
    Claim,
    Report,
    ReportSentence,
    RunError,
    RunMetrics,
    RunStatus,
    SentenceStatus,
    Source,
    SubQuestion,
)
from storage.store import EvidenceStore
from tasks.writer import Review


def slug(text: str, limit: int = 48) -> str:
    """Lower-case words joined by hyphens, as Prefect artifact keys and file names accept."""
    words = re.findall(r"[a-z0-9]+", text.casefold())
    return "-".join(words)[:limit].strip("-") or "question"


def caveats_for(
    subquestions: list[SubQuestion],
    claims: list[Claim],
    review: Review | None,
    errors: list[str],
    pages_found: int,
    pages_verified: int,
) -> list[str]:
    """Everything a reader must know that the report's sentences do not say, one line each."""
    caveats = list(errors)
    if pages_found > pages_verified:
        caveats.append(
            f"Only {pages_verified} of the {pages_found} pages found were verified (the per-run cap)."
        )
    answered = {claim.subquestion_id for claim in claims}
    caveats += [
        f'No verified evidence was found for "{sub.text}".' for sub in subquestions if sub.id not in answered
    ]
    if review is not None and review.removed:
        checks = sorted({reason.split(":")[0] for reason in review.removed.values()})
        caveats.append(
            f"{len(review.removed)} sentence(s) were removed because they failed the citation checks "
            f"({', '.join(checks)})."
        )
    if review is not None and review.caveat:
        caveats.append(review.caveat)
    return caveats


def run_status(review: Review | None, caveats: list[str]) -> RunStatus:
    if review is None or not review.kept:
        return RunStatus.failed
    return RunStatus.partial if caveats else RunStatus.complete


def render_markdown(
    question: str,
    engine_name: str,
    status: RunStatus,
    subquestions: list[SubQuestion],
    review: Review | None,
    sources: list[Source],
    caveats: list[str],
) -> str:
    lines = [f"# {question}", ""]
    how = (
        "extractively, from verified quotes (no language model)"
        if engine_name == "extractive"
        else (f"by {engine_name}, from verified quotes")
    )
    lines += [f"*Written {how}. Status: **{status.value}**.*", ""]
    if review is None or not review.kept:
        lines += ["No report could be written: no claim was verified against a fetched page.", ""]
    else:
        for sub in subquestions:
            section = [sentence for sentence in review.kept if sentence.section == sub.id]
            if not section:
                continue
            lines += [f"## {sub.text}", ""]
            # Quotes keep the page's line breaks; the report shows each claim as one line.
            lines += [
                f"- {' '.join(sentence.text.split())} {''.join(f'[{cite}]' for cite in sentence.cites)}"
                for sentence in section
            ]
            lines.append("")
    if caveats:
        lines += ["## Caveats", ""] + [f"- {caveat}" for caveat in caveats] + [""]
    cited = {cite for sentence in (review.kept if review else []) for cite in sentence.cites}
    listed = [source for source in sources if source.id in cited]
    if listed:
        lines += ["## Sources", ""]
        lines += [
            f"- [{source.id}] {source.title or source.url}. {source.url} (read {source.stored_at:%Y-%m-%d})"
            for source in listed
        ]
        lines.append("")
    return "\n".join(lines)


def report_sentences(run_id: str, review: Review | None) -> list[ReportSentence]:
    if review is None:
        return []
    return [
        ReportSentence(
            run_id=run_id,
            position=position,
            section=sentence.section,
            text=sentence.text,
            cites=sentence.cites,
            status=SentenceStatus.removed if position in review.removed else SentenceStatus.kept,
            reason=review.removed.get(position, ""),
        )
        for position, sentence in enumerate(review.draft.sentences)
    ]


def write_report_file(reports_dir: Path, run_id: str, question: str, markdown: str) -> Path:
    reports_dir.mkdir(parents=True, exist_ok=True)
    path = reports_dir / f"{datetime.now(UTC):%Y%m%d}-{slug(question, 40)}-{run_id[:8]}.md"
    path.write_text(markdown, encoding="utf-8")
    return path


def finish(
    store: EvidenceStore,
    run_id: str,
    question: str,
    engine_name: str,
    subquestions: list[SubQuestion],
    review: Review | None,
    sources: list[Source],
    claims: list[Claim],
    pages_found: int,
    pages_verified: int,
    metrics: RunMetrics,
    reports_dir: Path,
    budget_caveats: list[str],
) -> Report:
    """Assemble, store and write the report. `claims` are the verified claims of the run;
    `budget_caveats` say what the model budget stopped, if anything."""
    errors = [
        f"{error.stage}"
        + (f" for {error.subquestion_id}" if error.subquestion_id else "")
        + f": {error.detail}"
        for error in store.errors(run_id)
    ]
    caveats = caveats_for(subquestions, claims, review, errors + budget_caveats, pages_found, pages_verified)
    status = run_status(review, caveats)
    markdown = render_markdown(question, engine_name, status, subquestions, review, sources, caveats)
    sentences = report_sentences(run_id, review)
    store.add_report_sentences(sentences)
    path: str | None = None
    try:
        path = str(write_report_file(reports_dir, run_id, question, markdown))
    except OSError as error:  # a full disk or a read-only folder must not lose the run
        detail = (
            f"the report file could not be written in {reports_dir}: {error.strerror or error}; the report "
            "is kept in the store (runs.report_markdown) and as a Prefect artifact"
        )
        store.add_error(RunError(run_id=run_id, stage="finish", detail=detail))
        caveats = [*caveats, detail]
    store.finish_run(run_id, status, markdown, path, metrics)
    kept = [sentence for sentence in sentences if sentence.status is SentenceStatus.kept]
    cited = {cite for sentence in kept for cite in sentence.cites}
    return Report(
        run_id=run_id,
        question=question,
        status=status,
        answered=bool(kept),
        markdown=markdown,
        report_path=path,
        sources=[source for source in sources if source.id in cited],
        claims=claims,
        sentences=kept,
        caveats=caveats,
        metrics=metrics,
    )
