"""What the `citeflow` commands share: the consoles, the options, settings from flags, the Prefect server
a run goes to, and the supervision that ends a run cleanly on SIGINT or SIGTERM.

Errors are turned into one line on stderr and a non-zero exit here, at the boundary; nothing below
prints. Progress goes to stderr, so `--json` output on stdout stays one parseable object.
"""

from __future__ import annotations

import contextvars
import json
import logging
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
from prefect.states import State
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from citeflow.contracts import Question, Report
from citeflow.errors import CiteflowError, InputError
from citeflow.sanitize import clean_line

if TYPE_CHECKING:
    from citeflow.config import Loaded
    from storage.store import EvidenceStore

err = Console(stderr=True)
out = Console()


class StoreWaitLine(logging.Handler):
    """A wait for the store file held by another process, printed as one line on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        err.print(
            f"waiting: {clean_line(record.getMessage())}", markup=False, highlight=False, soft_wrap=True
        )


store_log = logging.getLogger("citeflow.store")
store_log.addHandler(StoreWaitLine())
store_log.propagate = False

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
    # One line, nothing a path or page put in it can move the cursor or colour the terminal.
    err.print(
        f"[bold red]error:[/] {escape(clean_line(str(error)))}", markup=True, highlight=False, soft_wrap=True
    )
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


def store_of(db: Path | None) -> EvidenceStore:
    """That store, which must exist, with the settings of how long to wait for it. For commands that
    only read: they never create a store (nor its folders) where a path was mistyped."""
    from storage.files import store_exists
    from storage.store import get_store

    settings = settings_from(None, flags(db=db)).settings
    if not store_exists(settings.db):
        raise InputError(
            str(settings.db),
            "does not exist; give the --db of a store that `citeflow ingest` or `citeflow run` made",
            "nothing was created",
        )
    return get_store(settings.db, settings.store)


def report_json(report: Report) -> dict[str, Any]:
    return {
        "run_id": report.run_id,
        "status": report.status.value,
        "answered": report.answered,
        "kind": report.kind,
        "report_path": report.report_path,
        "report": report.markdown,
        "sources": [{"id": s.id, "url": s.url, "title": s.title} for s in report.sources],
        "claims": [
            {"id": c.id, "source": c.source_id, "text": c.text, "quote": c.quote} for c in report.claims
        ],
        "sentences": [
            {"text": s.text, "cites": s.cites, "section": s.section, "pages": s.pages}
            for s in report.sentences
        ],
        "caveats": report.caveats,
        "metrics": report.metrics.model_dump(),
    }


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


def show_outcome(state: State, as_json: bool) -> None:
    """Print a finished run as a user asked for it: the report's path (and its caveats on stderr), or
    one JSON object; exit 1 when there is no report."""
    from flows.research import report_of

    result = report_of(state)
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
            err.print(f"  caveat: {clean_line(caveat)}", highlight=False, soft_wrap=True, markup=False)
        if result.report_path:
            out.print(result.report_path, highlight=False, soft_wrap=True)
    if result.report_path is None or result.status == "failed":
        raise typer.Exit(1)
