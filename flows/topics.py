"""The topics file (deployments/topics.yaml): its schema, and reading it with every error placed on a line.

A topic is a question researched on a schedule. The file is read here, below the flows, because a topic's
deployment carries only the topic's name: the flow reads the question from this file when it runs, so no
text a user typed ever passes through Prefect's deploy-time templating (`{{ $VAR }}`,
`{{ prefect.blocks... }}`, `{{ prefect.variables... }}`), which has no escape.
deployments/topics.py writes the file.

A file is taken whole or refused whole: a mapping whose only key is `topics`, a list of topics, each with
known keys only (a misspelt key is refused, never dropped), each name once, in UTF-8.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError
from prefect.client.schemas.schedules import CronSchedule
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from citeflow.contracts import Question
from citeflow.errors import InputError
from citeflow.web.settings import PROVIDER_NAMES, parse_provider_order

TOPICS_FILE = Path("deployments") / "topics.yaml"  # in the project folder a flow runs in
SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
NAME_MAX_CHARS = 48  # with a date, a flow run name and an artifact key stay short
UNCHANGED = "the file was left as it was"


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
        """The flow's parameters for this topic: what a run of its deployment gets with none given. The
        question is not one of them: the run reads it from the topics file (see the module's doc)."""
        settings: dict[str, Any] = {"search": self.search}
        if self.budget is not None:
            settings["caps.token_budget"] = self.budget
        parameters: dict[str, Any] = {"topic": self.name, "settings": settings}
        return parameters | ({"notify": self.notify} if self.notify else {})

    def next_run(self, after: datetime) -> datetime:
        return next(CronSim(self.cron, after.astimezone(ZoneInfo(self.timezone))))


def tag(name: str) -> str:
    return f"topic:{name}"


def round_trip() -> YAML:
    """ruamel's round-trip YAML: comments, key order and quoting survive a load and a dump; a duplicate
    key is an error."""
    yaml = YAML(typ="rt")
    yaml.width = 110
    yaml.indent(mapping=2, sequence=2, offset=0)
    return yaml


def read_document(path: Path) -> CommentedMap:
    """The file as a round-trip document, checked for shape: {topics: [mapping, ...]}. A missing file is
    an empty one."""
    if not path.exists():
        document = CommentedMap()
        document["topics"] = CommentedSeq()
        return document
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise InputError(
            f"{path}, line {line}", "is not UTF-8 text; save the file as UTF-8", UNCHANGED
        ) from None
    try:
        document = round_trip().load(text)
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{path}, line {mark.line + 1}" if mark else str(path)
        problem = " ".join(part for part in (error.context, error.problem) if part)
        raise InputError(where, f"is not valid YAML: {problem}", UNCHANGED) from None
    except YAMLError as error:
        raise InputError(str(path), f"is not valid YAML: {error}", UNCHANGED) from None
    if document is None:
        document = CommentedMap()
        document["topics"] = CommentedSeq()
    if not isinstance(document, CommentedMap):
        raise InputError(f"{path}, line 1", "must be a mapping with one key, `topics:`", UNCHANGED)
    for key in document:
        if key != "topics":
            line = document.lc.key(key)[0] + 1
            raise InputError(
                f"{path}, line {line}", f"unknown key {key!r}; the file holds one key, `topics:`", UNCHANGED
            )
    if "topics" not in document:
        raise InputError(f"{path}, line 1", "has no `topics:` list", UNCHANGED)
    items = document["topics"]
    if not isinstance(items, CommentedSeq):
        line = document.lc.key("topics")[0] + 1
        shown = "nothing" if items is None else repr(items)
        raise InputError(
            f"{path}, line {line}",
            f"`topics:` must be a list of topics, not {shown} (write `topics: []` for none)",
            UNCHANGED,
        )
    return document


def topics_of(document: CommentedMap, path: Path) -> list[Topic]:
    """Each topic of a document read by read_document, validated, each name once; or the first error on
    its line."""
    items: CommentedSeq = document["topics"]
    topics: list[Topic] = []
    for index, item in enumerate(items):
        line = items.lc.item(index)[0] + 1
        if not isinstance(item, CommentedMap):
            raise InputError(
                f"{path}, line {line}", "a topic must be a mapping of name, question, cron...", UNCHANGED
            )
        try:
            topic = Topic.model_validate(dict(item))
        except ValidationError as error:
            first = error.errors()[0]
            field = str(first["loc"][0]) if first["loc"] else ""
            if field in item:
                line = item.lc.key(field)[0] + 1
            problem = first["msg"].removeprefix("Value error, ")
            if first["type"] == "extra_forbidden":
                problem = f"unknown key {field!r}; a topic has {', '.join(Topic.model_fields)}"
            elif field:
                problem = f"{field}: {problem}"
            raise InputError(f"{path}, line {line}", problem, UNCHANGED) from None
        if any(known.name == topic.name for known in topics):
            raise InputError(f"{path}, line {line}", f"names topic {topic.name} a second time", UNCHANGED)
        topics.append(topic)
    return topics


def load_topics(path: Path = TOPICS_FILE) -> list[Topic]:
    return topics_of(read_document(path), path)


def topic_question(name: str, path: Path = TOPICS_FILE) -> str:
    """The question of the topic `name`, read when its deployment's run starts."""
    for topic in load_topics(path):
        if topic.name == name:
            return topic.question
    raise InputError(f"topic {name}", f"is not in {path}; it was removed since it was deployed")
