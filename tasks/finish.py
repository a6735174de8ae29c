"""Finish: the report in Markdown with its bibliography, and what failed or is missing, plainly.

The report opens with its answer (the draft's "" section) or, when the evidence does not answer, with a
sentence that says so; sources are numbered in the order the report first cites them, in the store too.
Every piece of text placed in the Markdown passes through `for_markdown`: a question, a page title or a
quote may hold HTML, and a Markdown viewer would render it. A failed run writes no report file; its
runs row keeps the Markdown that says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from citeflow.contracts import (
    Claim,
    Draft,
    DraftSentence,
    Report,
    ReportSentence,
    RunError,
    RunMetrics,
    RunStatus,
    SentenceStatus,
    Source,
    SubQuestion,
)
from citeflow.extractive.digest import DIFFER_SECTION
from citeflow.extractive.kind import ReportKind, report_kind
from citeflow.roles import CAVEAT_MAX_CHARS, FALLBACK_STAGE_SUFFIX
from citeflow.sanitize import for_markdown as md
from storage.store import EvidenceStore
from tasks.audit import audit
from tasks.changes import Changes, changes_markdown, changes_table
from tasks.context import current_run
from tasks.writer import Review

# A sub-question quoted in a caveat is cut to this, so the caveat stays one short line.
SUBQUESTION_SHOWN_CHARS = 150


def slug(text: str, limit: int = 48) -> str:
    """Lower-case words joined by hyphens, as Prefect artifact keys and file names accept."""
    words = re.findall(r"[a-z0-9]+", text.casefold())
    return "-".join(words)[:limit].strip("-") or "question"


NOT_FOUND = (
    "The verified evidence does not answer this question. What was found is listed below as related "
    "evidence only, not as an answer."
)
DIFFER_HEADING = "Where the sources differ"
DIFFER_NOTE = "These pages give different figures for what reads as the same statement; neither is chosen."
NOT_FOUND_CAVEAT = (
    "The verified evidence does not answer the question; the report cites related evidence only."
)


def answers(review: Review | None) -> bool:
    """Whether the report opens with an answer: a kept sentence of the answer section ("")."""
    return review is not None and any(sentence.section == "" for sentence in review.kept)


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
    if not answers(review):
        if review is not None and review.kept:
            caveats.append(NOT_FOUND_CAVEAT)
        # Only a report that does not answer misses what the unanswered sub-questions asked; for one that
        # answers they were leads that went nowhere (a follow-up about a name that had no page).
        found = {claim.subquestion_id for claim in claims}
        caveats += [
            f'No verified evidence was found for "{shortened(sub.text, SUBQUESTION_SHOWN_CHARS)}".'
            for sub in subquestions
            if sub.id not in found
        ]
    if review is not None and review.removed:
        checks = sorted({reason.split(":")[0] for reason in review.removed.values()})
        caveats.append(
            f"{len(review.removed)} sentence(s) were removed because they failed the citation checks "
            f"({', '.join(checks)})."
        )
    if review is not None and review.caveat:
        caveats.append(review.caveat)
    if review is not None and (differ := sum(s.section == DIFFER_SECTION for s in review.kept) // 2):
        caveats.append(
            f"{differ} pair(s) of pages give different figures for the same statement: both are shown "
            f'under "{DIFFER_HEADING}".'
        )
    return caveats


def shortened(text: str, limit: int) -> str:
    """The text on one line, cut to `limit` characters with an ellipsis when longer."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3].rstrip() + "..."


def error_caveats(errors: list[RunError]) -> list[str]:
    """One caveat line (at most CAVEAT_MAX_CHARS) per distinct problem: the same failure (a URL skipped,
    a provider down) met by several sub-questions is named once, with how many it affected. The full
    text of each stays in its row."""
    affected: dict[tuple[str, str], list[str]] = {}
    for error in errors:
        affected.setdefault((error.stage, error.detail), []).append(error.subquestion_id or "")
    caveats = []
    for (stage, detail), subquestions in affected.items():
        named = sorted({sub for sub in subquestions if sub})
        where = stage
        if len(named) == 1:
            where += f" for {named[0]}"
        elif named:
            where += f" ({len(named)} sub-questions)"
        caveats.append(shortened(f"{where}: {detail}", CAVEAT_MAX_CHARS))
    return caveats


def run_status(review: Review | None, caveats: list[str]) -> RunStatus:
    if review is None or not review.kept:
        return RunStatus.failed
    return RunStatus.partial if caveats else RunStatus.complete


Sentence = TypeVar("Sentence", DraftSentence, ReportSentence)


def reading_order(sentences: list[Sentence], subquestions: list[SubQuestion]) -> list[Sentence]:
    """The answer ("" section) first, then each sub-question's sentences in plan order; a section no
    sub-question has comes last. Within a section the draft's order holds."""
    rank = {"": -1} | {sub.id: sub.position for sub in subquestions}
    return sorted(sentences, key=lambda sentence: rank.get(sentence.section, len(rank)))


def first_cited_numbers(cited_in_order: list[DraftSentence], sources: list[Source]) -> dict[str, str]:
    """Old source id -> new: S1, S2, ... in the order the report first cites them, with no gaps; the
    sources it never cites are numbered after those, in their old order."""
    order = list(dict.fromkeys(cite for sentence in cited_in_order for cite in sentence.cites))
    known = {source.id for source in sources}
    order = [cite for cite in order if cite in known] + [s.id for s in sources if s.id not in order]
    return {old: f"S{number}" for number, old in enumerate(order, start=1)}


def renumbered(
    review: Review, sources: list[Source], claims: list[Claim], numbers: dict[str, str]
) -> tuple[Review, list[Source], list[Claim]]:
    """The review, sources and claims with every source id replaced by its new number."""
    draft = Draft(
        sentences=[
            sentence.model_copy(update={"cites": [numbers.get(cite, cite) for cite in sentence.cites]})
            for sentence in review.draft.sentences
        ]
    )
    sources = sorted(
        (source.model_copy(update={"id": numbers[source.id]}) for source in sources),
        key=lambda source: int(source.id[1:]),
    )
    claims = [
        claim.model_copy(update={"source_id": numbers.get(claim.source_id, claim.source_id)})
        if claim.source_id
        else claim
        for claim in claims
    ]
    return replace(review, draft=draft), sources, claims


def _shown(sentence: DraftSentence) -> str:
    # Quotes keep the page's line breaks; the report shows each claim on one line.
    return f"{md(' '.join(sentence.text.split()))} {''.join(f'[{cite}]' for cite in sentence.cites)}".strip()


def _finding(sentence: DraftSentence) -> str:
    pages = len(sentence.cites)
    return f"{_shown(sentence)} ({pages} pages)" if pages > 1 else _shown(sentence)


def digest_body(subquestions: list[SubQuestion], kept: list[DraftSentence]) -> list[str]:
    """A digest's findings under one heading per sub-question, in plan order, each with its number of
    pages; then the findings the pages disagree on, side by side."""
    lines: list[str] = []
    # The first sub-question is the question itself: its findings are those of no narrower aspect.
    headings = [(sub.id, sub.text if sub.position else "Other findings") for sub in subquestions]
    headings += [(section, "Other findings") for section in dict.fromkeys(s.section for s in kept)
                 if section not in {"", DIFFER_SECTION} | {sub.id for sub in subquestions}]  # fmt: skip
    for section, heading in headings:
        group = [sentence for sentence in kept if sentence.section == section]
        if group:
            lines += [f"## {md(heading)}", ""] + [f"- {_finding(sentence)}" for sentence in group] + [""]
    differ = [sentence for sentence in kept if sentence.section == DIFFER_SECTION]
    if differ:
        lines += [f"## {DIFFER_HEADING}", "", f"*{DIFFER_NOTE}*", ""]
        lines += [f"- {_shown(sentence)}" for sentence in differ] + [""]
    return lines


def _ended(title: str) -> str:
    """A source's title closed by a full stop, unless it ends as a sentence already ("... ecosystem.")."""
    return title if title.endswith((".", "!", "?", "\u2026")) else f"{title}."


def render_markdown(
    question: str,
    engine_name: str,
    status: RunStatus,
    subquestions: list[SubQuestion],
    review: Review | None,
    sources: list[Source],
    caveats: list[str],
    changes: list[str] | None = None,
    kind: ReportKind = ReportKind.answer,
) -> str:
    """The answer first, then the sentences that support it; or, when the evidence does not answer,
    a first sentence that says so and the related evidence. Then (for a recurring topic) what changed
    since its last run, the caveats and the cited sources. Text from pages, questions and models is
    escaped (md)."""
    lines = [f"# {md(question)}", ""]
    how = (
        "extractively, from verified quotes (no language model)"
        if engine_name == "extractive"
        else (f"by {md(engine_name)}, from verified quotes")
    )
    lines += [f"*Written {how}. Status: **{status.value}**.*", ""]
    kept = reading_order(review.kept, subquestions) if review is not None else []
    answer = [sentence for sentence in kept if sentence.section == ""]
    rest = [sentence for sentence in kept if sentence.section != ""]
    if not kept:
        lines += ["No report could be written: no claim was verified against a fetched page.", ""]
    elif answer and kind == ReportKind.digest:
        lines += [" ".join(_finding(sentence) for sentence in answer), ""]
    elif answer:
        lines += [" ".join(_shown(sentence) for sentence in answer), ""]
    else:
        lines += [NOT_FOUND, ""]
    if rest and kind == ReportKind.digest:
        lines += digest_body(subquestions, rest)
    elif rest:
        lines += ["## Supporting evidence" if answer else "## Related evidence", ""]
        lines += [f"- {_shown(sentence)}" for sentence in rest] + [""]
    lines += changes or []
    if caveats:
        lines += ["## Caveats", ""] + [f"- {md(caveat)}" for caveat in caveats] + [""]
    cited = {cite for sentence in kept for cite in sentence.cites}
    listed = [source for source in sources if source.id in cited]
    if listed:
        lines += ["## Sources", ""]
        lines += [
            f"- [{source.id}] {_ended(md(source.title or source.url))} {md(source.url)} "
            f"(read {source.stored_at:%Y-%m-%d})"
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
            pages=len(set(sentence.cites)),
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
    model_caveats: list[str],
    changes: Changes | None = None,
) -> Report:
    """Assemble the report, audit it against the store, then store it and write its file. `claims` are
    the verified claims of the run; `model_caveats` say where roles fell back and what the model budget
    stopped, one line each (the error rows of fallbacks are not repeated); `changes`, for a recurring
    topic, what changed since its last run.

    The audit runs before the run is stored as complete: a report that fails it (a bug in a stage, never
    expected) is stored as failed, with the problems in the run's errors. A failed run writes no file."""
    errors = error_caveats(
        [error for error in store.errors(run_id) if not error.stage.endswith(FALLBACK_STAGE_SUFFIX)]
    )
    if review is not None:
        numbers = first_cited_numbers(reading_order(review.kept, subquestions), sources)
        review, sources, claims = renumbered(review, sources, claims, numbers)
        store.renumber_sources(run_id, numbers)
    caveats = caveats_for(subquestions, claims, review, errors + model_caveats, pages_found, pages_verified)
    status = run_status(review, caveats)
    sentences = report_sentences(run_id, review)
    kept = reading_order([s for s in sentences if s.status is SentenceStatus.kept], subquestions)
    cited = {cite for sentence in kept for cite in sentence.cites}
    report = Report(
        run_id=run_id,
        question=question,
        status=status,
        answered=answers(review),
        kind=report_kind(question),
        markdown="",
        sources=[source for source in sources if source.id in cited],
        claims=[claim for claim in claims if claim.source_id in cited],  # only claims it lists sources of
        sentences=kept,
        caveats=caveats,
        metrics=metrics,
    )
    store.add_report_sentences(sentences)
    if problems := audit(store, report):
        for problem in problems:
            store.add_error(RunError(run_id=run_id, stage="audit", detail=problem))
        caveats = [*caveats, f"The report failed its integrity audit and was withheld: {problems[0]}"]
        report = report.model_copy(update={"status": RunStatus.failed, "caveats": caveats})
    section = changes_markdown(changes) if changes is not None else None
    markdown = render_markdown(
        question, engine_name, report.status, subquestions, review, sources, caveats, section, report.kind
    )
    report = report.model_copy(update={"markdown": markdown})
    if report.status is not RunStatus.failed:
        try:
            path = write_report_file(reports_dir, run_id, question, markdown)
            report = report.model_copy(update={"report_path": str(path)})
        except OSError as error:  # a full disk or a read-only folder must not lose the run
            detail = (
                f"the report file could not be written in {reports_dir}: {error.strerror or error}; the "
                "report is kept in the store (runs.report_markdown) and as a Prefect artifact"
            )
            store.add_error(RunError(run_id=run_id, stage="finish", detail=detail))
            report = report.model_copy(update={"caveats": [*report.caveats, detail]})
    store.finish_run(run_id, report.status, markdown, report.report_path, metrics, report.kind)
    return report


def publish_artifacts(report: Report, key: str, changes: Changes | None) -> None:
    """The report, its sources, its metrics and (for a topic) its changes as Prefect artifacts; a repeated
    key keeps a history, so `report-NAME` is a topic's latest report."""
    create_markdown_artifact(markdown=report.markdown, key=f"report-{key}", description=report.question)
    create_table_artifact(
        table=[
            {"id": s.id, "title": s.title, "url": s.url, "read": s.stored_at.isoformat()}
            for s in report.sources
        ],
        key=f"sources-{key}",
        description=f"Sources cited by run {report.run_id}",
    )
    create_table_artifact(
        table=[stage.model_dump() for stage in report.metrics.stages],
        key=f"metrics-{key}",
        description=f"Per-stage metrics of run {report.run_id}",
    )
    if changes is not None:
        create_table_artifact(
            table=changes_table(changes),
            key=f"changes-{key}",
            description=f"What changed since the topic's last run, run {report.run_id}",
        )


@dataclass(frozen=True)
class Finding:
    """What the stages of a run found, as finish turns it into the report."""

    subquestions: list[SubQuestion]
    review: Review | None  # None when nothing was verified, so nothing was written
    sources: list[Source]
    claims: list[Claim]  # the verified ones
    pages_found: int
    pages_verified: int
    metrics: RunMetrics
    changes: Changes | None  # for a recurring topic, what changed since its last run
    fallback_caveats: list[str]  # one line per role that fell back to the extractive engine


@task(name="finish", cache_policy=NO_CACHE)
def finish_task(found: Finding, artifact_key: str) -> Report:
    run = current_run()
    with run.store.session():  # the report's rows, its audit and the run's final status in one hold
        report = finish(
            run.store,
            run.run_id,
            run.question,
            run.engine.name,
            found.subquestions,
            found.review,
            found.sources,
            found.claims,
            found.pages_found,
            found.pages_verified,
            found.metrics,
            Path(run.settings.reports),
            found.fallback_caveats + run.models.budget.caveats(),
            found.changes,
        )
    publish_artifacts(report, artifact_key, found.changes)
    return report
