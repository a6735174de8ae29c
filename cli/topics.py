"""`citeflow topics`: recurring research topics, each a deployment of the flow with its own schedule.

Run from the folder holding prefect.yaml (the repository): the topics live in deployments/topics.yaml
there, and prefect.yaml is regenerated from them on every change.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from citeflow.errors import CiteflowError, InputError
from cli.common import DbOption, err, fail, out, prefect_api, show_outcome, store_of, store_path, supervised

topics_app = typer.Typer(
    help="Recurring research topics: one scheduled deployment each.", no_args_is_help=True
)
NameArgument = Annotated[str, typer.Argument(help="The topic's name, a slug such as duckdb-search.")]


def files() -> tuple[Path, Path]:
    """deployments/topics.yaml and prefect.yaml of the project in the working folder."""
    here = Path.cwd()
    if not (here / "deployments").is_dir():
        raise InputError(
            str(here), "holds no deployments/ folder; run `citeflow topics` from the citeflow repository"
        )
    return here / "deployments" / "topics.yaml", here / "prefect.yaml"


@topics_app.command("add")
def add(
    name: NameArgument,
    question: Annotated[str, typer.Option("--question", help="The question researched on each run.")],
    cron: Annotated[str, typer.Option("--cron", help="When it runs, e.g. '0 6 * * 1' (Mondays 06:00).")],
    timezone: Annotated[
        str, typer.Option("--timezone", help="The zone of the cron, e.g. Europe/Paris.")
    ] = "UTC",
    search: Annotated[
        str, typer.Option("--search", help="Providers, e.g. local or wikipedia,local.")
    ] = "local",
    budget: Annotated[int | None, typer.Option("--budget", help="Model tokens a run may spend.")] = None,
    notify: Annotated[
        str | None, typer.Option("--notify", help="A Prefect notification block, TYPE/NAME, told of changes.")
    ] = None,
) -> None:
    """Add a topic and regenerate prefect.yaml; bad input changes nothing."""
    from deployments.topics import add_topic, new_topic

    try:
        topics_file, prefect_yaml = files()
        topic = new_topic(
            name=name,
            question=question,
            cron=cron,
            timezone=timezone,
            search=search,
            budget=budget,
            notify=notify,
        )
        add_topic(topic, topics_file, prefect_yaml)
    except CiteflowError as error:
        fail(error)
    out.print(
        f"added {name}: next run {topic.next_run(datetime.now(UTC)):%Y-%m-%d %H:%M %Z}", highlight=False
    )
    err.print("deploy it with `prefect deploy --all` (work pool citeflow) or `python -m deployments.serve`")


@topics_app.command("remove")
def remove(name: NameArgument, db: DbOption = None) -> None:
    """Remove a topic and regenerate prefect.yaml; the server that has its deployment (PREFECT_API_URL,
    or the `citeflow server` of the store's folder) deletes it and its schedule. Past runs stay."""
    from deployments.topics import FLOW_NAME, remove_topic

    try:
        remove_topic(name, *files())
        deleted = delete_deployment(f"{FLOW_NAME}/{name}", store_path(db))
    except CiteflowError as error:
        fail(error)
    out.print(f"removed {name}" + (f" and deployment {deleted}" if deleted else ""), highlight=False)


def delete_deployment(deployment: str, db: Path) -> str | None:
    """Delete `deployment` (and so its schedules) from the server this project uses, when one is up and
    has it; its name if deleted. No temporary server is started for this."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    from cli.server import running_server

    url = get_current_settings().api.url or getattr(running_server(db), "url", None)
    if not url:
        return None
    with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
        try:
            found = client.read_deployment_by_name(deployment)
        except ObjectNotFound:
            return None
        except Exception as error:  # noqa: BLE001 - a server that cannot be reached keeps nothing to delete
            raise InputError(
                f"Prefect server {url}",
                f"could not be asked for {deployment}: {error}",
                "the topic is removed from the files; delete the deployment with `prefect deployment delete`",
            ) from None
        client.delete_deployment(found.id)
    return deployment


@topics_app.command("sync")
def sync() -> None:
    """Regenerate prefect.yaml from deployments/topics.yaml (after an edit by hand)."""
    from deployments.topics import sync_topics

    try:
        topics = sync_topics(*files())
    except CiteflowError as error:
        fail(error)
    out.print(f"prefect.yaml now deploys {len(topics)} topic(s)", highlight=False)


@topics_app.command("list")
def list_topics(db: DbOption = None) -> None:
    """Each topic: its schedule, its last run and that run's status, its next run."""
    from flows.topics import load_topics

    try:
        topics = load_topics(files()[0])
        store = store_of(db) if store_path(db).exists() else None  # no store yet: no topic has run
        now = datetime.now(UTC)
        for topic in topics:
            runs = store.recent_runs(limit=1, topic=topic.name) if store else []
            last = f"{runs[0].status.value} {runs[0].started_at:%Y-%m-%d %H:%M} UTC" if runs else "never run"
            line = (
                f"{topic.name}  {topic.cron} ({topic.timezone})  last: {last}  "
                f"next: {topic.next_run(now):%Y-%m-%d %H:%M %Z}  {topic.question}"
            )
            out.print(line, markup=False, highlight=False, soft_wrap=True)
    except CiteflowError as error:
        fail(error)
    if not topics:
        err.print("no topics yet: add one with `citeflow topics add NAME --question Q --cron CRON`")


@topics_app.command("run")
def run_now(
    name: NameArgument,
    db: DbOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of the path.")
    ] = False,
) -> None:
    """Run a topic now: through its deployment when a server has it (a worker or `python -m
    deployments.serve` picks the run up), else in this process."""
    from deployments.topics import FLOW_NAME
    from flows.topics import load_topics, tag

    try:
        topic = next((t for t in load_topics(files()[0]) if t.name == name), None)
        if topic is None:
            raise InputError(f"topic {name}", "does not exist; `citeflow topics list` shows them")
        database = store_path(db)
        with prefect_api(database):
            queued = queued_through_deployment(f"{FLOW_NAME}/{name}")
            if queued is not None:
                out.print(f"queued run {queued} of deployment {FLOW_NAME}/{name}", highlight=False)
                return
            from prefect import tags

            from flows.research import research_flow

            settings = {**topic.parameters()["settings"], **({"db": str(db)} if db else {})}
            with tags(tag(name)):
                state = supervised(
                    lambda: research_flow(
                        question=topic.question,
                        topic=name,
                        settings=settings,
                        notify=topic.notify,
                        return_state=True,
                    ),
                    database,
                )
    except CiteflowError as error:
        fail(error)
    show_outcome(state, as_json)


def queued_through_deployment(deployment: str) -> str | None:
    """The id of a flow run created now for `deployment`, or None when the server has no such deployment."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_deployment_by_name(deployment)
        except ObjectNotFound:
            return None
    return str(run_deployment(deployment, timeout=0).id)


@topics_app.command("diff")
def diff(name: NameArgument, db: DbOption = None) -> None:
    """What changed between the topic's last two successful runs."""
    from tasks.changes import changes_markdown, last_two_compared

    try:
        changes = last_two_compared(store_of(db), name)
    except CiteflowError as error:
        fail(error)
    if changes is None:
        err.print(f"topic {name} has fewer than two successful runs to compare")
        raise typer.Exit(1)
    out.print("\n".join(changes_markdown(changes)), markup=False, highlight=False, soft_wrap=True)
