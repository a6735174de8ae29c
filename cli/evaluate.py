"""`citeflow eval CORPUS QUESTIONS`: run a dataset's questions through the research flow and score them.

Registered on the `citeflow` app by cli/main.py; it takes the run options of `citeflow run`. Prints a table
per question and one of overall figures, writes both as JSON, and publishes them as Prefect table artifacts
(flows/evaluate.py). Exits 1 if any report failed its integrity audit: that is a bug, never a score.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from citeflow.config import keep_private, shown
from citeflow.errors import CiteflowError, InputError
from cli.common import (
    BaseUrlOption,
    ConfigOption,
    ModelOption,
    SearchOption,
    SetOption,
    err,
    fail,
    flags,
    out,
    prefect_api,
    settings_from,
)

DEFAULT_CONCURRENCY = 2


@contextmanager
def quiet_prefect_console() -> Iterator[None]:
    """Prefect's per-run log lines off the terminal (they still reach the Prefect API), so the progress
    bar stays readable; restored afterwards."""
    from prefect.logging.handlers import PrefectConsoleHandler

    handlers = [h for h in logging.getLogger().handlers if isinstance(h, PrefectConsoleHandler)]
    levels = [handler.level for handler in handlers]
    for handler in handlers:
        handler.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for handler, level in zip(handlers, levels, strict=True):
            handler.setLevel(level)


def results_table(rows: list[dict[str, object]], unanswerable: bool) -> Table:
    # Evidence is strict (a quote from the gold page); gold pages are those the report cites.
    expected = "not found expected" if unanswerable else "an answer expected"
    table = Table(*rows[0].keys(), title=f"Per question ({expected})")
    for row in rows:
        table.add_row(*(str(value) for value in row.values()))
    return table


def print_results(rows: list[dict[str, object]], unanswerable: bool) -> None:
    """The per-question table; where the terminal is narrower than it (80 columns), one block per
    question of `name value` pairs, wrapped between pairs, never inside one."""
    table = results_table(rows, unanswerable)
    if table_fits(table):
        out.print(table)
        return
    out.print(table.title, style="italic", highlight=False)
    for row in rows:
        (_, first), *rest = row.items()
        lines = [str(first)]
        for pair in (f"{name} {value}" for name, value in rest):
            if len(lines) > 1 and len(lines[-1]) + 3 + len(pair) <= out.width:
                lines[-1] += f" · {pair}"
            else:
                lines.append(f"  {pair}")
        out.print("\n".join(lines), highlight=False, markup=False, soft_wrap=True)


def table_fits(table: Table) -> bool:
    """Whether every column keeps its widest cell on one line at this width (borders included)."""
    widths = [max(len(str(cell)) for cell in [column.header, *column.cells]) for column in table.columns]
    return sum(widths) + 3 * len(widths) + 1 <= out.width


def summary_table(figures: dict[str, object]) -> Table:
    table = Table("figure", "value", title="Overall")
    for name, value in figures.items():
        table.add_row(name, str(value))
    return table


def evaluate(
    corpus: Annotated[Path, typer.Argument(help="The corpus, JSON Lines: {url, title, text} a line.")],
    questions: Annotated[
        Path,
        typer.Argument(help="The questions, JSON Lines: {id, question, answers, supporting} a line."),
    ],
    limit: Annotated[int | None, typer.Option(min=1, help="Questions to run (default: all).")] = None,
    offset: Annotated[int, typer.Option(min=0, help="Questions to skip first.")] = 0,
    concurrency: Annotated[int, typer.Option(min=1, help="Questions run at once.")] = DEFAULT_CONCURRENCY,
    unanswerable: Annotated[
        bool,
        typer.Option(
            "--unanswerable",
            help="Remove each question's gold pages from the corpus: every report should say not found.",
        ),
    ] = False,
    out_path: Annotated[
        Path | None,
        typer.Option("--out", help="Where to write the JSON results. Default: ./reports/eval-....json"),
    ] = None,
    search: SearchOption = None,
    config: ConfigOption = None,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    set_: SetOption = None,
) -> None:
    """Score the research flow on a dataset: a fresh store, every question a normal run.

    Runs see the question text only; answers and gold evidence are read to score each finished run."""
    try:
        from tasks.evaluation import load_questions

        if not corpus.is_file():
            raise InputError(str(corpus), "is not a file", "nothing was run")
        chosen = load_questions(questions, limit, offset)
        if not chosen:
            raise InputError(f"--offset {offset}", "is past the last question", "nothing was run")
        overrides = flags(search=search, model=model, base_url=base_url, settings=set_)
        settings_from(config, overrides)  # a bad setting fails here, before any run
    except CiteflowError as error:
        fail(error)
    dataset = questions.stem.removesuffix(".questions")
    folder = Path(tempfile.mkdtemp(prefix=f"citeflow-eval-{dataset}-"))
    err.print(f"{len(chosen)} questions of {dataset}; stores and reports in {folder}", highlight=False)

    from flows.evaluate import eval_flow, result_row, summary_figures

    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err
    )
    bar = progress.add_task("questions", total=len(chosen))
    try:
        # One Prefect server for every run of the evaluation: the citeflow server of the eval's folder
        # when one is up, else a temporary one.
        with prefect_api(folder / "evidence.duckdb"), quiet_prefect_console(), progress:
            evaluation = eval_flow(
                dataset=dataset,
                corpus=corpus,
                questions=questions,
                folder=folder,
                limit=limit,
                offset=offset,
                concurrency=concurrency,
                unanswerable=unanswerable,
                config=str(config) if config else None,
                settings=keep_private(overrides),  # Prefect stores parameters: no credentials
                on_result=lambda result: progress.advance(bar),
            )
    except CiteflowError as error:  # e.g. the corpus could not be loaded: no question could run
        fail(error)
    rows = [result_row(result) for result in evaluation.results]
    print_results(rows, unanswerable)
    out.print(summary_table(summary_figures(evaluation.summary)))
    mode = "-unanswerable" if unanswerable else ""
    path = out_path or Path("reports") / f"eval-{dataset}{mode}-{datetime.now(UTC):%Y%m%d-%H%M%S}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "dataset": dataset,
        "corpus": str(corpus),
        "questions": str(questions),
        "offset": offset,
        "limit": limit,
        "unanswerable": unanswerable,
        "settings": {name: shown(value) for name, value in overrides.items()},
        "summary": evaluation.summary.model_dump(),
        "results": [result.model_dump() for result in evaluation.results],
    }
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    err.print(f"results written to {path}", highlight=False)
    if evaluation.summary.integrity_problems:
        err.print(
            f"[bold red]error:[/] {evaluation.summary.integrity_problems} integrity problem(s): "
            "a report cites what its run did not verify (see the results' integrity_problems)"
        )
        raise typer.Exit(1)
