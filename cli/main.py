"""The `citeflow` command: run a question, ingest documents, query the evidence store, and the runs,
settings, server and recurring topics around them."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from citeflow.errors import CiteflowError, InputError
from citeflow.prefect_env import apply_prefect_defaults
from citeflow.sanitize import clean_line, for_terminal

apply_prefect_defaults()  # before anything imports Prefect, which reads its settings once

if TYPE_CHECKING:
    from citeflow.config import Settings
    from storage.store import EvidenceStore

from cli.common import (  # noqa: E402 - Prefect's defaults must be set first
    BaseUrlOption,
    ConfigOption,
    DbOption,
    ModelOption,
    SearchOption,
    SetOption,
    checked_question,
    err,
    fail,
    flags,
    out,
    prefect_api,
    settings_from,
    show_outcome,
    store_of,
    store_path,
    supervised,
)
from cli.evaluate import evaluate  # noqa: E402
from cli.topics import topics_app  # noqa: E402

app = typer.Typer(
    help="A research assistant whose every sentence cites a quote found on a page it read.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(topics_app, name="topics")
app.command("eval")(evaluate)


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
        loaded = settings_from(config, dotted)  # a bad setting fails here, before any run
        settings = loaded.settings
        from citeflow.web.providers import provider_chain
        from storage.store import get_store

        store = get_store(settings.db, settings.store)
        providers = provider_chain(settings.web, settings.search, local_available=True)
        if providers == ["local"] and store.page_count() == 0:
            raise InputError(
                str(store.path),
                "holds no pages to search; load documents with `citeflow ingest PATH...` first, "
                "or search the web with --search",
                "nothing was run",
            )
        with prefect_api(settings.db):
            from citeflow.config import keep_private
            from flows.research import research_flow

            state = supervised(
                lambda: research_flow(
                    question=text,
                    # Prefect stores parameters: no credentials. The models an endpoint was asked for
                    # are passed on, so the flow asks no endpoint again.
                    settings=keep_private(dotted) | loaded.served_models(),
                    config=str(config) if config else None,
                    refresh=refresh,
                    return_state=True,
                ),
                settings.db,
            )
    except CiteflowError as error:
        fail(error)
    show_outcome(state, as_json)


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders: HTML, Markdown, text, JSON Lines.")],
    db: DbOption = None,
) -> None:
    """Load documents into the evidence store for local search."""
    from storage.ingest import ingest_paths
    from storage.store import get_store

    try:
        settings = settings_from(None, flags(db=db)).settings
        store = get_store(settings.db, settings.store)
        report = ingest_paths(store, paths, max_chars=settings.caps.page_text_max_chars)
    except CiteflowError as error:
        fail(error)
    except MemoryError:
        fail(
            InputError(
                "ingest", "ran out of memory while loading", "nothing was loaded; the store is unchanged"
            )
        )
    out.print(
        f"{report.records} records from {report.files} files: {report.new} new, {report.changed} changed, "
        f"{report.unchanged} unchanged",
        highlight=False,
    )
    if report.cut:
        err.print(
            f"  {report.cut} records cut to {report.max_chars:,} characters "
            "(the page-text cap, caps.page_text_max_chars)",
            highlight=False,
        )
    for skipped in report.skipped:
        err.print(f"  skipped {clean_line(skipped)}", markup=False, highlight=False, soft_wrap=True)


@app.command()
def sql(
    statement: Annotated[str, typer.Argument(help="One read-only SQL statement, e.g. SELECT * FROM runs.")],
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print rows as JSON Lines.")] = False,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", help="Stop the query after SECONDS. Default: 60.", metavar="SECONDS"),
    ] = None,
    memory_limit: Annotated[
        str | None,
        typer.Option("--memory-limit", help="Memory the query may use, e.g. 500MB or 4GB. Default: 1GB."),
    ] = None,
    max_rows: Annotated[
        int | None,
        typer.Option("--max-rows", min=1, help="Print at most N rows, saying so when cut. Default: 10,000."),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            help="Read a DuckLake store as it was when run RUN_ID finished, or at a UTC TIMESTAMP.",
            metavar="RUN_ID|TIMESTAMP",
        ),
    ] = None,
) -> None:
    """Run one read-only query against the evidence store and print the rows."""
    from storage.store import read_only_query

    try:
        settings = sql_settings(db, timeout, memory_limit, max_rows)
        columns, rows = read_only_query(settings.db, statement, settings.store, at)
    except CiteflowError as error:
        fail(error)
    except MemoryError:
        fail(
            InputError(
                "SQL", "its rows did not fit in memory; select fewer (LIMIT)", "the store is unchanged"
            )
        )
    cut = getattr(rows, "cut", "")
    if as_json:
        for row in rows:
            sys.stdout.write(json.dumps(dict(zip(columns, row, strict=True)), default=str) + "\n")
        if not rows:
            sys.stdout.write("[]\n")  # valid JSON for "no rows", rather than nothing at all
        if cut:
            err.print(f"cut: printed {cut}", highlight=False, soft_wrap=True)
        return
    # Text cells, not markup: a page title like "[red]" must print as written, and cleaned of controls.
    table = Table(show_lines=False)
    for column in columns:
        table.add_column(Text(for_terminal(column)))
    for row in rows:
        table.add_row(*(Text("" if value is None else for_terminal(str(value))) for value in row))
    out.print(table)
    err.print(f"{len(rows)} rows" + (f"; cut: printed {cut}" if cut else ""), highlight=False, soft_wrap=True)


def sql_settings(
    db: Path | None, timeout: float | None, memory_limit: str | None, max_rows: int | None = None
) -> Settings:
    """The settings with --timeout, --memory-limit and --max-rows applied, each refused in its own words."""
    chosen = {"store.sql_timeout_seconds": timeout, "store.sql_memory_limit": memory_limit}
    for name, value in chosen.items():
        if value is None:
            continue
        try:
            settings_from(None, {name: value})
        except CiteflowError:
            flag, expected = (
                ("--timeout", "a number of seconds above 0")
                if name.endswith("seconds")
                else ("--memory-limit", "a size such as 500MB or 4GB")
            )
            raise InputError(
                f"{flag} {value if isinstance(value, str) else f'{value:g}'}", f"expected {expected}"
            ) from None
    given = {name: value for name, value in chosen.items() if value is not None}
    if max_rows is not None:  # typer has checked it is a whole number of at least 1
        given["store.sql_max_rows"] = max_rows
    return settings_from(None, {**flags(db=db), **given}).settings


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
        fmt = f", {check.reply_format}, {check.token_parameter}" if check.reply_format else ""
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


def crashed_in_known_prefect(store: EvidenceStore) -> None:
    """Runs just marked crashed are set Crashed in Prefect too, when its server is up (PREFECT_API_URL or
    the `citeflow server` of the store's folder); else the next run does it. No server is started."""
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    from cli.server import running_server
    from flows.lifecycle import crashed_in_prefect_too

    url = get_current_settings().api.url or getattr(running_server(store.path), "url", None)
    if url:
        with temporary_settings({PREFECT_API_URL: url}):
            crashed_in_prefect_too(store)


@app.command()
def runs(
    db: DbOption = None,
    limit: Annotated[int, typer.Option(help="How many, newest first.")] = 20,
) -> None:
    """List recent runs: id, question, status, started, seconds."""
    from flows.lifecycle import mark_crashed

    try:
        store = store_of(db)
        if mark_crashed(store):
            crashed_in_known_prefect(store)
        recent = store.recent_runs(limit)
    except CiteflowError as error:
        fail(error)
    # One line a run, the question last: ids stay whole and columns stay aligned at any width.
    for one in recent:
        seconds = "" if one.wall_seconds is None else f"{one.wall_seconds:.1f}"
        line = f"{one.run_id}  {one.status.value:<9}  {one.started_at:%Y-%m-%d %H:%M:%S}  {seconds:>7}  "
        out.print(line + one.question, markup=False, highlight=False, soft_wrap=True)


@app.command()
def audit(
    run_id: Annotated[str, typer.Argument(help="The run whose report to check again (see citeflow runs).")],
    db: DbOption = None,
    latest: Annotated[
        bool,
        typer.Option(
            "--latest",
            help="Check the claims against each page's newest stored version instead of the version "
            "cited, and list those it no longer supports.",
        ),
    ] = False,
) -> None:
    """Re-verify a past report: each sentence against the exact page versions it cited (content hashes,
    quote offsets, sentence checks), one line each; exits 1 on any problem."""
    from tasks.audit import audit_run

    try:
        result = audit_run(store_of(db), run_id, latest)
    except CiteflowError as error:
        fail(error)
    for problem in result.problems:
        err.print(f"error: {clean_line(problem)}", markup=False, highlight=False, soft_wrap=True)
    for sentence in result.sentences:
        cites = f" [{', '.join(sentence.cites)}]" if sentence.cites else ""
        verdict = "ok" if not sentence.problems else "FAILED: " + "; ".join(sentence.problems)
        line = f"{sentence.position:>3}  {verdict}  {clean_line(sentence.text)}{cites}"
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    if result.unsupported_claims:
        newest = "the newest page versions" if latest else "the page versions cited"
        out.print(f"claims {newest} no longer support:", markup=False, highlight=False)
        for line in result.unsupported_claims:
            out.print(f"  {clean_line(line)}", markup=False, highlight=False, soft_wrap=True)
    if not result.sound:
        raise typer.Exit(1)


store_app = typer.Typer(help="The evidence store itself: a .duckdb file or a DuckLake.", no_args_is_help=True)
app.add_typer(store_app, name="store")


@store_app.command("copy")
def store_copy(
    source: Annotated[str, typer.Argument(help="The store to copy from: a .duckdb file or ducklake:...")],
    target: Annotated[str, typer.Argument(help="The store to copy into (created if missing).")],
) -> None:
    """Copy every row SOURCE holds and TARGET lacks (a .duckdb file into a lake, or back); prints the
    rows copied per table. A second copy adds nothing. A lake's data path: $CITEFLOW_STORE__DATA_PATH."""
    from storage.copy import copy_store
    from storage.store import EvidenceStore

    try:
        settings = settings_from(None, {}).settings.store
        copied = copy_store(
            EvidenceStore.open(Path(source), settings=settings),
            EvidenceStore.open(Path(target), settings=settings),
        )
    except CiteflowError as error:
        fail(error)
    for table, count in copied.items():
        out.print(f"{table:<17} {count:>9} rows copied", markup=False, highlight=False)


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


@app.command("worker", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def worker(
    ctx: typer.Context,
    pool: Annotated[str, typer.Option(help="The process work pool whose topic runs it takes.")] = "citeflow",
) -> None:
    """Run a Prefect worker for the topics' work pool: `prefect worker start --pool POOL` and any further
    option of Prefect's (--name, --limit), which stops on SIGTERM however it was started."""
    # Prefect's worker stops on SIGTERM by sending itself SIGINT. A process started with `&` from a script
    # begins with SIGINT ignored, and `exec` keeps an ignored signal ignored: such a worker never stopped.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    command = [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, *ctx.args]
    os.execv(sys.executable, command)
