"""Recurring topics: one file of them (deployments/topics.yaml), and prefect.yaml generated from it.

A topic is a question researched on a schedule. Each becomes one deployment of the flow
`citeflow-research`, named after the topic, whose parameters are the topic's, so
`prefect deployment run citeflow-research/NAME` needs none. `citeflow topics add|remove|sync` write
topics.yaml and regenerate prefect.yaml from it; a test fails when the two differ.

Writes are all-or-nothing: a topic that fails validation leaves both files as they were.
"""

from __future__ import annotations

import os
import re
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import yaml
from cronsim import CronSim, CronSimError
from prefect.client.schemas.schedules import CronSchedule
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from citeflow.contracts import Question
from citeflow.errors import InputError
from citeflow.web.settings import PROVIDER_NAMES, parse_provider_order

REPO = Path(__file__).resolve().parent.parent
TOPICS_FILE = REPO / "deployments" / "topics.yaml"
PREFECT_YAML = REPO / "prefect.yaml"
FLOW_NAME = "citeflow-research"
ENTRYPOINT = "flows/research.py:research_flow"
WORK_POOL = "citeflow"
SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
NAME_MAX_CHARS = 48  # with a date, a flow run name and an artifact key stay short


class Topic(BaseModel):
    """A question researched on a schedule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="A slug: lower-case letters, digits and single hyphens.")
    question: str
    cron: str = Field(description="When it runs, e.g. '0 6 * * 1' for Mondays at 06:00.")
    timezone: str = Field("UTC", description="The zone the cron expression is read in, e.g. Europe/Paris.")
    search: str = Field("local", description="Search providers, first tried first, comma-separated.")
    budget: int | None = Field(None, ge=0, description="Model tokens a run may spend (caps.token_budget).")
    notify: str | None = Field(
        None,
        description="A Prefect notification block, as TYPE/NAME (e.g. custom-webhook/team), told of "
        "runs that find changes or fail.",
    )

    @field_validator("name")
    @classmethod
    def _slug(cls, name: str) -> str:
        if not SLUG.fullmatch(name) or len(name) > NAME_MAX_CHARS:
            raise ValueError(
                f"{name!r} is not a slug of at most {NAME_MAX_CHARS} characters (lower-case letters, digits "
                "and single hyphens, e.g. duckdb-search)"
            )
        return name

    @field_validator("question")
    @classmethod
    def _question(cls, question: str) -> str:
        try:
            return Question(text=question).text
        except ValidationError as error:
            raise ValueError(error.errors()[0]["msg"].removeprefix("Value error, ")) from None

    @field_validator("search")
    @classmethod
    def _providers(cls, search: str) -> str:
        chosen = parse_provider_order(search)
        unknown = [name for name in chosen if name not in PROVIDER_NAMES]
        if not chosen or unknown:
            raise ValueError(
                f"unknown search provider {(unknown or [search])[0]!r}; known: {', '.join(PROVIDER_NAMES)}"
            )
        return ",".join(chosen)

    @field_validator("notify")
    @classmethod
    def _block_slug(cls, notify: str | None) -> str | None:
        if notify is not None and not re.fullmatch(r"[a-z0-9-]+/[A-Za-z0-9_-]+", notify):
            raise ValueError(f"{notify!r} is not a notification block as TYPE/NAME, e.g. custom-webhook/team")
        return notify

    @model_validator(mode="after")
    def _schedule(self) -> Topic:
        # Prefect's own schedule model says whether Prefect will take the cron and zone; cronsim, which
        # computes the next run here, must take them too.
        try:
            CronSchedule(cron=self.cron, timezone=self.timezone)
            CronSim(self.cron, datetime.now(ZoneInfo(self.timezone)))
        except (ValidationError, CronSimError, ValueError, KeyError) as error:
            problem = error.errors()[0]["msg"] if isinstance(error, ValidationError) else str(error)
            problem = problem.removeprefix("Value error, ")
            raise ValueError(
                f"{self.cron!r} in zone {self.timezone} is not a cron schedule: {problem}"
            ) from None
        return self

    def parameters(self) -> dict[str, Any]:
        """The flow's parameters for this topic: what a run of its deployment gets with none given."""
        settings: dict[str, Any] = {"search": self.search}
        if self.budget is not None:
            settings["caps.token_budget"] = self.budget
        parameters = {"question": self.question, "topic": self.name, "settings": settings}
        return parameters | ({"notify": self.notify} if self.notify else {})

    def next_run(self, after: datetime) -> datetime:
        return next(CronSim(self.cron, after.astimezone(ZoneInfo(self.timezone))))


def tag(name: str) -> str:
    return f"topic:{name}"


def load_topics(path: Path = TOPICS_FILE) -> list[Topic]:
    if not path.exists():
        return []
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        topics = [Topic.model_validate(item) for item in data.get("topics", [])]
    except (yaml.YAMLError, ValidationError, AttributeError) as error:
        raise InputError(str(path), f"is not a valid topics file: {error}", "nothing was changed") from None
    names = [topic.name for topic in topics]
    if len(names) != len(set(names)):
        raise InputError(str(path), "names a topic twice", "nothing was changed")
    return topics


def new_topic(**fields: Any) -> Topic:
    """A topic from what a user typed, or one line saying what is wrong with it."""
    try:
        return Topic.model_validate({name: value for name, value in fields.items() if value is not None})
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "schedule"  # the cron and zone together
        raise InputError(
            where, first["msg"].removeprefix("Value error, "), "the topics file is unchanged"
        ) from None


def add_topic(topic: Topic, topics_file: Path = TOPICS_FILE, prefect_yaml: Path = PREFECT_YAML) -> None:
    topics = load_topics(topics_file)
    if any(existing.name == topic.name for existing in topics):
        raise InputError(
            f"topic {topic.name}", "already exists; remove it first", "the topics file is unchanged"
        )
    save_topics([*topics, topic], topics_file, prefect_yaml)


def remove_topic(name: str, topics_file: Path = TOPICS_FILE, prefect_yaml: Path = PREFECT_YAML) -> Topic:
    topics = load_topics(topics_file)
    found = [topic for topic in topics if topic.name == name]
    if not found:
        known = ", ".join(topic.name for topic in topics) or "none"
        raise InputError(f"topic {name}", f"does not exist (topics: {known})", "the topics file is unchanged")
    save_topics([topic for topic in topics if topic.name != name], topics_file, prefect_yaml)
    return found[0]


def save_topics(
    topics: list[Topic], topics_file: Path = TOPICS_FILE, prefect_yaml: Path = PREFECT_YAML
) -> None:
    """Write topics.yaml and the prefect.yaml generated from it, each replaced whole."""
    body = {"topics": [topic.model_dump(exclude_none=True) for topic in topics]}
    header = "# Recurring research topics. Edit with `citeflow topics add|remove`; `citeflow topics sync`\n"
    header += "# regenerates prefect.yaml after an edit by hand.\n"
    _replace(topics_file, header + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=110))
    _replace(prefect_yaml, generated_prefect_yaml(topics))


def generated_prefect_yaml(topics: list[Topic]) -> str:
    """prefect.yaml for `topics`: one deployment each, named after it, on the work pool `citeflow`."""
    deployments = [
        {
            "name": topic.name,
            "description": f"Recurring research: {topic.question}",
            "entrypoint": ENTRYPOINT,
            "tags": ["citeflow", tag(topic.name)],
            # Runs of one topic never overlap; topics run side by side.
            "concurrency_limit": 1,
            "work_pool": {"name": WORK_POOL},
            "parameters": topic.parameters(),
            "schedules": [{"cron": topic.cron, "timezone": topic.timezone}],
        }
        for topic in topics
    ]
    header = (
        "# Generated from deployments/topics.yaml by `citeflow topics sync`: edit the topics there.\n"
        "# Deploy to a process work pool and run a worker from this folder:\n"
        "#   prefect work-pool create citeflow --type process\n"
        "#   prefect deploy --all\n"
        "#   prefect worker start --pool citeflow\n"
        "# or serve them with no work pool: python -m deployments.serve\n"
    )
    body = {"name": "citeflow", "prefect-version": "3.9.1", "deployments": deployments}
    return header + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=110)


def _replace(path: Path, text: str) -> None:
    """Write `text` to `path` atomically: readers see the old file or the new one, never half of one."""
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, delete=False) as handle:
        handle.write(text)
    os.replace(handle.name, path)
