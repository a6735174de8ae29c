"""The `citeflow` command: run a question, ingest documents, query the evidence store.

Errors are turned into one line on stderr and a non-zero exit here, at the boundary; nothing below
prints. Progress goes to stderr, so `--json` output on stdout stays one parseable object.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from citeflow.contracts import Question, Report
from citeflow.errors import CiteflowError, InputError
from citeflow.prefect_env import apply_prefect_defaults

apply_prefect_defaults()  # before anything imports Prefect, which reads its settings once

app = typer.Typer(
    help="A research assistant whose every sentence cites a quote found on a page it read.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
out = Console()

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="Model roles config (TOML). Default: ./citeflow.toml when it exists."),
]
ModelOption = Annotated[
    str | None, typer.Option("--model", help="Model for every role (default: $CITEFLOW_MODEL).")
]
BaseUrlOption = Annotated[
    str | None,
    typer.Option("--base-url", help="OpenAI-compatible endpoint for every role (default: $OPENAI_BASE_URL)."),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="One role setting, SECTION.KEY=VALUE, e.g. planner.model=qwen3:1.7b or models.cost_budget=0.5. "
        "Repeatable; overrides the config file.",
    ),
]
DbOption = Annotated[
    Path | None,
    typer.Option("--db", help="Evidence store (DuckDB file). Default: $CITEFLOW_DB or ./citeflow.duckdb."),
]


def fail(error: CiteflowError) -> None:
    # Escaped: messages name config sections such as "[models]", which rich would read as markup and drop.
    err.print(f"[bold red]error:[/] {escape(str(error))}", markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def db_path(db: Path | None) -> Path:
    from citeflow.config import Settings

    return db or Settings().db


def checked_question(text: str) -> str:
    try:
        return Question(text=text).text
    except ValidationError as error:
        problem = str(error.errors()[0]["msg"]).removeprefix("Value error, ")
        raise InputError("the question", problem, "nothing was run and the store is unchanged") from None


def model_overrides(
    model: str | None, base_url: str | None, settings: list[str] | None
) -> dict[str, dict[str, Any]]:
    """--model, --base-url and --set as sections of citeflow.toml, which they override."""
    overrides: dict[str, dict[str, Any]] = {"defaults": {}}
    if model:
        overrides["defaults"]["model"] = model
    if base_url:
        overrides["defaults"]["base_url"] = base_url
    for item in settings or []:
        key, equals, raw = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not (equals and dot and section and name):
            raise InputError(f"--set {item}", "expected SECTION.KEY=VALUE, e.g. planner.model=qwen3:8b")
        overrides.setdefault(section, {})[name] = toml_value(raw.strip())
    return {section: values for section, values in overrides.items() if values}


def toml_value(raw: str) -> Any:
    """A --set value read as TOML would read it (0.5 is a number, true a boolean), else as text."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def report_json(report: Report) -> dict[str, Any]:
    return {
        "run_id": report.run_id,
        "status": report.status.value,
        "answered": report.answered,
        "report_path": report.report_path,
        "report": report.markdown,
        "sources": [{"id": s.id, "url": s.url, "title": s.title} for s in report.sources],
        "claims": [
            {"id": c.id, "source": c.source_id, "text": c.text, "quote": c.quote} for c in report.claims
        ],
        "sentences": [{"text": s.text, "cites": s.cites} for s in report.sentences],
        "caveats": report.caveats,
        "metrics": report.metrics.model_dump(),
    }


@app.command()
def run(
    question: Annotated[str, typer.Argument(help="The research question (at most 2,000 characters).")],
    search: Annotated[
        str | None,
        typer.Option(
            help="Search providers, first tried first: local, searxng, duckduckgo, wikipedia, "
            "tavily, or a list such as wikipedia,local. Default: $CITEFLOW_SEARCH or local."
        ),
    ] = None,
    db: DbOption = None,
    reports: Annotated[Path | None, typer.Option(help="Folder for reports. Default: ./reports.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of the path.")
    ] = False,
    config: ConfigOption = None,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    set_: SetOption = None,
) -> None:
    """Research QUESTION and write a cited report; prints the report's path.

    With no model endpoint configured, the extractive engine plays every role, offline."""
    try:
        text = checked_question(question)
        from citeflow.llm.settings import load_model_settings

        overrides = model_overrides(model, base_url, set_)
        load_model_settings(config, overrides=overrides)  # a bad config fails here, before any run
        from citeflow.config import Settings
        from citeflow.web.providers import provider_chain
        from citeflow.web.settings import WebSettings
        from storage.store import get_store

        # A bad --db or --search fails here, before any run starts.
        store = get_store(db_path(db))
        providers = provider_chain(WebSettings.from_env(), search or Settings().search, local_available=True)
        if providers == ["local"] and store.page_count() == 0:
            raise InputError(
                str(store.path),
                "holds no pages to search; load documents with `citeflow ingest PATH...` first, "
                "or search the web with --search",
                "nothing was run",
            )
        from flows.research import research_flow

        state = research_flow(
            question=text,
            search=search,
            db=str(db) if db else None,
            reports=str(reports) if reports else None,
            config=str(config) if config else None,
            models=overrides,
            return_state=True,
        )
    except CiteflowError as error:
        fail(error)
    result = state.result(raise_on_failure=False)
    if isinstance(result, CiteflowError):
        fail(result)
    if not isinstance(result, Report):
        err.print(f"[bold red]error:[/] the run crashed: {state.message or result}", soft_wrap=True)
        raise typer.Exit(1)
    if as_json:
        sys.stdout.write(json.dumps(report_json(result), ensure_ascii=False) + "\n")
    else:
        err.print(
            f"{result.status.value} report: {len(result.sentences)} sentences, {len(result.sources)} sources"
        )
        for caveat in result.caveats:
            err.print(f"  caveat: {caveat}", highlight=False, soft_wrap=True)
        if result.report_path:
            out.print(result.report_path, highlight=False, soft_wrap=True)
    if result.report_path is None:
        raise typer.Exit(1)
    if result.status == "failed":
        raise typer.Exit(1)


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders: HTML, Markdown, text, JSON Lines.")],
    db: DbOption = None,
) -> None:
    """Load documents into the evidence store for local search."""
    from storage.ingest import ingest_paths
    from storage.store import get_store

    try:
        report = ingest_paths(get_store(db_path(db)), paths)
    except CiteflowError as error:
        fail(error)
    out.print(
        f"{report.records} records from {report.files} files: {report.new} new, {report.changed} changed, "
        f"{report.unchanged} unchanged",
        highlight=False,
    )
    for skipped in report.skipped:
        err.print(f"  skipped {skipped}", highlight=False, soft_wrap=True)


@app.command()
def sql(
    statement: Annotated[str, typer.Argument(help="One read-only SQL statement, e.g. SELECT * FROM runs.")],
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print rows as JSON Lines.")] = False,
) -> None:
    """Run one read-only query against the evidence store and print the rows."""
    from storage.store import read_only_query

    try:
        columns, rows = read_only_query(db_path(db), statement)
    except CiteflowError as error:
        fail(error)
    if as_json:
        for row in rows:
            sys.stdout.write(json.dumps(dict(zip(columns, row, strict=True)), default=str) + "\n")
        return
    table = Table(*columns, show_lines=False)
    for row in rows:
        table.add_row(*("" if value is None else str(value) for value in row))
    out.print(table)
    err.print(f"{len(rows)} rows")


models_app = typer.Typer(help="Model endpoints for the roles.", no_args_is_help=True)
app.add_typer(models_app, name="models")


@models_app.command("check")
def models_check(
    config: ConfigOption = None,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    set_: SetOption = None,
) -> None:
    """Call each configured endpoint once and report, per role, what works and what does not."""
    from citeflow.llm.check import CheckStatus, check_models
    from citeflow.llm.settings import load_model_settings

    try:
        checks = check_models(load_model_settings(config, overrides=model_overrides(model, base_url, set_)))
    except CiteflowError as error:
        fail(error)
    for check in checks:
        where = f" {check.model} at {check.endpoint}" if check.model else ""
        timing = f" in {check.latency_seconds:.2f}s" if check.latency_seconds is not None else ""
        fmt = f", {check.reply_format}" if check.reply_format else ""
        status = check.status.value.replace("_", " ")
        line = f"{check.role}: {status}{where}{timing}{fmt}. {check.detail}"
        out.print(line.rstrip(), highlight=False, soft_wrap=True)
    if any(check.status is CheckStatus.failed for check in checks):
        raise typer.Exit(1)


# `citeflow eval` lives in its own module, which reuses the run options above and registers itself on app.
import citeflow.eval_command  # noqa: E402, F401
