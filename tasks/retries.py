"""When a failed task run is worth another attempt."""

from __future__ import annotations

from prefect import Task
from prefect.client.schemas.objects import TaskRun
from prefect.states import State

from citeflow.llm.errors import ModelRejected


def not_rejected(task: Task, task_run: TaskRun, state: State) -> bool:
    """Retry anything but a model endpoint's 400/401/403/404, which no retry changes."""
    return not isinstance(state.result(raise_on_failure=False), ModelRejected)
