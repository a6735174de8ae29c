"""The `citeflow` command: run a question, ingest documents, query the evidence store.

Errors are turned into one line on stderr and a non-zero exit here, at the boundary; nothing below
prints. Progress goes to stderr, so `--json` output on stdout stays one parseable object.
"""

from __future__ import annotations

import contextvars
import json
import os
import signal
import sys
import threading
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from citeflow.contracts import Question, Report
from citeflow.errors import CiteflowError, InputError
from citeflow.prefect_env import apply_prefect_defaults

apply_prefect_defaults()  # before anything imports Prefect, which reads its settings once

if TYPE_CHECKING:
    from citeflow.config import Loaded

app = typer.Typer(
    help="A research assistant whose every sentence cites a quote found on a page it read.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
out = Console()

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="Settings file (TOML). Default: ./citeflow.toml when it exists."),
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
        help="One setting, NAME=VALUE, e.g. caps.token_budget=50000 or planner.model=qwen3:1.7b. "
        "Repeatable; overrides citeflow.toml and the environment. `citeflow config show` lists every name.",
    ),
]
DbOption = Annotated[
    Path | None,
    typer.Option("--db", help="Evidence store (DuckDB file). Default: $CITEFLOW_DB or ./citeflow.duckdb."),
]
SearchOption = Annotated[
    str | None,
    typer.Option(
        help="Search providers, first tried first: local, searxng, duckduckgo, wikipedia, "
        "tavily, or a list such as wikipedia,local. Default: $CITEFLOW_SEARCH or local."
    ),
]


def fail(error: CiteflowError) -> NoReturn:
    # Escaped: messages name config sections such as "[models]", which rich would read as markup and drop.
    err.print(f"[bold red]error:[/] {escape(str(error))}", markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def checked_question(text: str) -> str:
    try:
        return Question(text=text).text
    except ValidationError as error:
        problem = str(error.errors()[0]["msg"]).removeprefix("Value error, ")
        raise InputError("the question", problem, "nothing was run and the store is unchanged") from None


def flags(
    db: Path | None = None,
    reports: Path | None = None,
    search: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
    settings: list[str] | None = None,
) -> dict[str, Any]:
    """The command line's settings by dotted name, as the settings tree takes them over every other layer."""
    chosen: dict[str, Any] = {
        "db": str(db) if db else None,
        "reports": str(reports) if reports else None,
        "search": search,
        "defaults.model": model,
        "defaults.base_url": base_url,
    }
    dotted = {name: value for name, value in chosen.items() if value}
    for item in settings or []:
        name, equals, raw = item.partition("=")
        if not (equals and name.strip()):
            raise InputError(f"--set {item}", "expected NAME=VALUE, e.g. planner.model=qwen3:8b")
        dotted[name.strip()] = toml_value(raw.strip())
    return dotted


def toml_value(raw: str) -> Any:
    """A --set value read as TOML would read it (0.5 is a number, true a boolean), else as text."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def settings_from(config: Path | None, dotted: dict[str, Any]) -> Loaded:
    from citeflow.config import load_settings

    return load_settings(dotted, config, flags_source="command line")


def store_path(db: Path | None) -> Path:
    """The store a command works on: --db, else CITEFLOW_DB or citeflow.toml, else ./citeflow.duckdb."""
    return settings_from(None, flags(db=db)).settings.db


def report_json(report: Report) -> dict[str, Any]:
    return {
        "run_id": report.run_id,
        "status": report.status.value,
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
    search: SearchOption = None,
    db: DbOption = None,
    reports: Annotated[Path | None, typer.Option(help="Folder for reports. Default: ./reports.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of the path.")
    ] = False,
    refresh: Annotated[
        bool, typer.Option("--refresh", help="Compute every stage again instead of reusing cached results.")
    ] = False,
    config: ConfigOption = None,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    set_: SetOption = None,
) -> None:
    """Research QUESTION and write a cited report; prints the report's path.

    With no model endpoint configured, the extractive engine plays every role, offline. Runs go to the
    `citeflow server` of the store's folder when one is up, else to a temporary Prefect server."""
    try:
        text = checked_question(question)
        dotted = flags(db, reports, search, model, base_url, set_)
        settings = settings_from(config, dotted).settings  # a bad setting fails here, before any run
        from citeflow.web.providers import provider_chain
        from storage.store import get_store

        store = get_store(settings.db)
        providers = provider_chain(settings.web, settings.search, local_available=True)
        if providers == ["local"] and store.page_count() == 0:
            raise InputError(
                str(store.path),
                "holds no pages to search; load documents with `citeflow ingest PATH...` first, "
                "or search the web with --search",
                "nothing was run",
            )
        with prefect_api(settings.db):
            from flows.research import research_flow

            state = supervised(
                lambda: research_flow(
                    question=text,
                    settings=dotted,
                    config=str(config) if config else None,
                    refresh=refresh,
                    return_state=True,
                ),
                settings.db,
            )
    except CiteflowError as error:
        fail(error)
    result = state.result(raise_on_failure=False)
    if isinstance(result, CiteflowError):
        fail(result)
    if not isinstance(result, Report):
        err.print(
            f"[bold red]error:[/] the run failed: {escape(str(state.message or result))}", soft_wrap=True
        )
        raise typer.Exit(1)
    if as_json:
        sys.stdout.write(json.dumps(report_json(result), ensure_ascii=False) + "\n")
    else:
        err.print(
            f"{result.status.value} report: {len(result.sentences)} sentences, {len(result.sources)} sources"
        )
        for caveat in result.caveats:
            err.print(f"  caveat: {caveat}", highlight=False, soft_wrap=True, markup=False)
        if result.report_path:
            out.print(result.report_path, highlight=False, soft_wrap=True)
    if result.report_path is None or result.status == "failed":
        raise typer.Exit(1)


@contextmanager
def prefect_api(db: Path) -> Iterator[None]:
    """Point Prefect at a server for this run: PREFECT_API_URL when the user set one, else the `citeflow
    server` of the store's folder, else a temporary server stopped when the run ends (said once)."""
    from prefect.logging.handlers import APILogHandler
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    from cli.server import running_server, temporary_server

    if get_current_settings().api.url:
        yield
        return
    if (state := running_server(db)) is not None:
        with temporary_settings({PREFECT_API_URL: state.url}):
            yield
        return
    err.print(
        "No citeflow server is running for this store: starting a temporary one. "
        "`citeflow server start` keeps one up (runs start in seconds, with the UI).",
        highlight=False,
        soft_wrap=True,
    )
    with temporary_server(db) as url, temporary_settings({PREFECT_API_URL: url}):
        try:
            yield
        finally:
            APILogHandler().flush()  # the run's last log lines, while the server still answers


T = TypeVar("T")
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


def supervised(body: Callable[[], T], db: Path) -> T:
    """Run `body` (a flow run) in a thread while this thread waits for it and for SIGINT and SIGTERM.

    A signal ends the run within seconds, whatever its threads are waiting for: its row and its Prefect
    flow run are marked cancelled, one line is printed, and the process exits (130 or 143) without
    waiting for in-flight model calls or fetches. A temporary server ends with this process."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = body()
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread, which raises it
            outcome["error"] = error

    received: list[int] = []
    handlers = {
        signum: signal.signal(signum, lambda signum, _: received.append(signum)) for signum in EXIT_CODES
    }
    # The thread runs in a copy of this context: Prefect's settings (the API URL) live in context variables.
    worker = threading.Thread(
        target=contextvars.copy_context().run, args=(target,), name="citeflow-run", daemon=True
    )
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
            if received:
                cancel_and_exit(db, received[0])
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def cancel_and_exit(db: Path, signum: int) -> NoReturn:
    """Mark this process's running runs cancelled, in the store and in Prefect, stop the processes this
    one started (a temporary server), say so in one line, and exit now."""
    import psutil

    from flows.lifecycle import cancel_runs_of_this_process

    name = signal.Signals(signum).name
    cancelled = cancel_runs_of_this_process(db, f"No report: the run was cancelled ({name}).")
    children = psutil.Process().children(recursive=True)
    for child in children:
        child.terminate()
    _, alive = psutil.wait_procs(children, timeout=2)
    for child in alive:
        child.kill()
    which = ", ".join(cancelled) or "no run had started"
    err.print(f"cancelled ({name}): {which}; its row says cancelled.", highlight=False, soft_wrap=True)
    sys.stderr.flush()
    os._exit(EXIT_CODES[signum])


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders: HTML, Markdown, text, JSON Lines.")],
    db: DbOption = None,
) -> None:
    """Load documents into the evidence store for local search."""
    from storage.ingest import ingest_paths
    from storage.store import get_store

    try:
        report = ingest_paths(get_store(store_path(db)), paths)
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
        columns, rows = read_only_query(store_path(db), statement)
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

    try:
        loaded = settings_from(config, flags(model=model, base_url=base_url, settings=set_))
        checks = check_models(loaded.settings.model_settings())
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


config_app = typer.Typer(
    help="The settings tree: defaults < citeflow.toml < environment < flags.", no_args_is_help=True
)
app.add_typer(config_app, name="config")


@config_app.command("show")
def config_show(
    config: ConfigOption = None,
    db: DbOption = None,
    search: SearchOption = None,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    set_: SetOption = None,
) -> None:
    """Print every setting a run would use, and where its value came from."""
    from citeflow.config import effective_values

    try:
        loaded = settings_from(
            config, flags(db=db, search=search, model=model, base_url=base_url, settings=set_)
        )
    except CiteflowError as error:
        fail(error)
    rows = effective_values(loaded)
    width = max(len(name) for name, _, _ in rows)
    for name, value, source in rows:
        # One line a setting, as TOML would spell the value, so it can be grepped and copied into --set.
        out.print(
            f"{name:<{width}} = {json.dumps(value, default=str)}  # {source}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    err.print(f"settings hash {loaded.settings.digest()}", highlight=False)


@app.command()
def runs(
    db: DbOption = None,
    limit: Annotated[int, typer.Option(help="How many, newest first.")] = 20,
) -> None:
    """List recent runs: id, question, status, started, seconds."""
    from flows.lifecycle import mark_crashed
    from storage.store import get_store

    try:
        store = get_store(store_path(db))
        mark_crashed(store)
        recent = store.recent_runs(limit)
    except CiteflowError as error:
        fail(error)
    # One line a run, the question last: ids stay whole and columns stay aligned at any width.
    for one in recent:
        seconds = "" if one.wall_seconds is None else f"{one.wall_seconds:.1f}"
        line = f"{one.run_id}  {one.status.value:<9}  {one.started_at:%Y-%m-%d %H:%M:%S}  {seconds:>7}  "
        out.print(line + one.question, markup=False, highlight=False, soft_wrap=True)


server_app = typer.Typer(
    help="The local Prefect server that runs, schedules and the UI share.", no_args_is_help=True
)
app.add_typer(server_app, name="server")
PortOption = Annotated[int, typer.Option(help="Port on 127.0.0.1 (or --host).")]


@server_app.command("start")
def server_start(
    db: DbOption = None,
    host: Annotated[
        str, typer.Option(help="Address to listen on. Keep loopback unless you mean it.")
    ] = "127.0.0.1",
    port: PortOption = 4200,
) -> None:
    """Start a Prefect server in the background, its database under the store's folder."""
    from cli.server import start_server

    try:
        state = start_server(store_path(db), host, port)
    except CiteflowError as error:
        fail(error)
    out.print(f"running at {state.ui} (pid {state.pid}); log {state.log}", highlight=False, soft_wrap=True)
    err.print(f"for prefect commands: export PREFECT_API_URL={state.url}", highlight=False, soft_wrap=True)


@server_app.command("stop")
def server_stop(db: DbOption = None) -> None:
    """Stop the server `citeflow server start` started for this store's folder."""
    from cli.server import stop_server

    try:
        state = stop_server(store_path(db))
    except CiteflowError as error:
        fail(error)
    out.print(
        f"stopped the server at {state.ui}" if state else "no citeflow server was running", highlight=False
    )


@server_app.command("status")
def server_status(db: DbOption = None) -> None:
    """Say whether this store's server is up, and where."""
    from cli.server import running_server

    try:
        state = running_server(store_path(db))
    except CiteflowError as error:
        fail(error)
    if state is None:
        out.print("not running; start it with `citeflow server start`", highlight=False)
        raise typer.Exit(1)
    out.print(
        f"running at {state.ui} (pid {state.pid}, since {state.started_at:%Y-%m-%d %H:%M:%S} UTC)",
        highlight=False,
    )
