"""Writing the recurring topics: deployments/topics.yaml, and prefect.yaml generated from it.

Each topic becomes one deployment of the flow `citeflow-research`, named after the topic, so `prefect
deployment run citeflow-research/NAME` needs no parameters. Its parameters are the topic's name and
settings, never its question: `prefect deploy` evaluates `{{ ... }}` in every field of prefect.yaml and has
no escape, so the flow reads the question from topics.yaml when it runs (flows/topics.py).

`citeflow topics add|remove` change topics.yaml in place (its comments and layout kept) under a file lock,
so concurrent commands are applied one after the other; `sync` only regenerates prefect.yaml. A file that
does not validate, or a topic that does not, leaves both files as they were. A test fails when the two
files differ.
"""

from __future__ import annotations

import fcntl
import io
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from ruamel.yaml.comments import CommentedMap

from citeflow.errors import InputError
from flows.topics import Topic, read_document, round_trip, tag, topics_of

REPO = Path(__file__).resolve().parent.parent
TOPICS_FILE = REPO / "deployments" / "topics.yaml"
PREFECT_YAML = REPO / "prefect.yaml"
FLOW_NAME = "citeflow-research"
ENTRYPOINT = "flows/research.py:research_flow"
WORK_POOL = "citeflow"
HEADER = (
    "# Recurring research topics. Edit with `citeflow topics add|remove`; `citeflow topics sync`\n"
    "# regenerates prefect.yaml after an edit by hand.\n"
)


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


@contextmanager
def locked(topics_file: Path) -> Iterator[None]:
    """Hold the project's topics lock: one `topics add|remove|sync` reads and writes the files at a time.
    The lock is a file beside topics.yaml, since topics.yaml itself is replaced on each write."""
    lock_path = topics_file.with_name(topics_file.name + ".lock")
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def add_topic(topic: Topic, topics_file: Path = TOPICS_FILE, prefect_yaml: Path = PREFECT_YAML) -> None:
    with locked(topics_file):
        document = read_document(topics_file)
        topics = topics_of(document, topics_file)
        if any(existing.name == topic.name for existing in topics):
            raise InputError(
                f"topic {topic.name}", "already exists; remove it first", "the topics file is unchanged"
            )
        entry = CommentedMap(topic.model_dump(exclude_none=True))
        document["topics"].append(entry)
        write_files(document, [*topics, topic], topics_file, prefect_yaml)


def remove_topic(name: str, topics_file: Path = TOPICS_FILE, prefect_yaml: Path = PREFECT_YAML) -> Topic:
    with locked(topics_file):
        document = read_document(topics_file)
        topics = topics_of(document, topics_file)
        index = next((i for i, topic in enumerate(topics) if topic.name == name), None)
        if index is None:
            known = ", ".join(topic.name for topic in topics) or "none"
            raise InputError(
                f"topic {name}", f"does not exist (topics: {known})", "the topics file is unchanged"
            )
        del document["topics"][index]
        write_files(document, topics[:index] + topics[index + 1 :], topics_file, prefect_yaml)
        return topics[index]


def sync_topics(topics_file: Path = TOPICS_FILE, prefect_yaml: Path = PREFECT_YAML) -> list[Topic]:
    """Regenerate prefect.yaml from topics.yaml, which is read and never rewritten."""
    with locked(topics_file):
        topics = topics_of(read_document(topics_file), topics_file)
        _replace(prefect_yaml, generated_prefect_yaml(topics))
        return topics


def write_files(document: CommentedMap, topics: list[Topic], topics_file: Path, prefect_yaml: Path) -> None:
    """Write topics.yaml (a new file gets a header saying how to edit it) and prefect.yaml."""
    text = io.StringIO()
    round_trip().dump(document, text)
    header = "" if topics_file.exists() else HEADER
    _replace(topics_file, header + text.getvalue())
    _replace(prefect_yaml, generated_prefect_yaml(topics))


def generated_prefect_yaml(topics: list[Topic]) -> str:
    """prefect.yaml for `topics`: one deployment each, named after it, on the work pool `citeflow`."""
    deployments = [
        {
            "name": topic.name,
            "description": f"Recurring research topic {topic.name}, its question in deployments/topics.yaml",
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
        "#   citeflow worker --pool citeflow\n"
        "# or serve them with no work pool: python -m deployments.serve\n"
    )
    body = {"name": "citeflow", "prefect-version": "3.9.1", "deployments": deployments}
    return header + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=110)


def _replace(path: Path, text: str) -> None:
    """Write `text` to `path` atomically: readers see the old file or the new one, never half of one."""
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, delete=False) as handle:
        handle.write(text)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    os.chmod(handle.name, mode)  # a temporary file is private (0600); the project's files are not
    os.replace(handle.name, path)
