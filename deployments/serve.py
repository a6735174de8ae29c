"""Serve the deployments declared in prefect.yaml from this process, with their schedules.

For a machine with `prefect server start` running and no work pool: `python -m deployments.serve`.
prefect.yaml stays the one place where recurring topics are declared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from prefect import serve
from prefect.deployments.runner import RunnerDeployment
from prefect.schedules import Cron, Schedule

from flows.research import research_flow

PREFECT_YAML = Path(__file__).resolve().parent.parent / "prefect.yaml"


def schedules_of(deployment: dict[str, Any]) -> list[Schedule]:
    return [
        Cron(
            schedule["cron"],
            timezone=schedule.get("timezone", "UTC"),
            slug=schedule.get("slug"),
            parameters=schedule.get("parameters", {}),
        )
        for schedule in deployment.get("schedules", [])
    ]


def declared_deployments(path: Path = PREFECT_YAML) -> list[dict[str, Any]]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))["deployments"]


def runner_deployments(path: Path = PREFECT_YAML) -> list[RunnerDeployment]:
    return [
        research_flow.to_deployment(
            name=deployment["name"],
            description=deployment.get("description"),
            tags=deployment.get("tags", []),
            parameters=deployment.get("parameters", {}),
            concurrency_limit=deployment.get("concurrency_limit"),
            schedules=schedules_of(deployment),
        )
        for deployment in declared_deployments(path)
    ]


def main() -> None:
    serve(*runner_deployments())


if __name__ == "__main__":
    main()
