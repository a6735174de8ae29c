"""Serve the recurring topics of deployments/topics.yaml from this process, with no work pool.

For a machine with a Prefect server running (`citeflow server start`) and no worker:
`python -m deployments.serve`, from the folder holding prefect.yaml. Each topic is the deployment
`citeflow-research/NAME`, as `prefect deploy --all` would make it, so `prefect deployment run
citeflow-research/NAME` works either way. The two ways cannot both own a topic: serving refuses a topic
already deployed to a work pool (runs would be picked up twice), saying how to switch.
"""

from __future__ import annotations

import sys
from pathlib import Path

from prefect import serve
from prefect.client.orchestration import get_client
from prefect.deployments.runner import RunnerDeployment
from prefect.exceptions import ObjectNotFound
from prefect.schedules import Cron

from citeflow.errors import CiteflowError, InputError
from deployments.topics import FLOW_NAME
from flows.research import research_flow
from flows.topics import Topic, load_topics, tag


def runner_deployments(topics: list[Topic]) -> list[RunnerDeployment]:
    return [
        research_flow.to_deployment(
            name=topic.name,
            description=f"Recurring research topic {topic.name}, its question in deployments/topics.yaml",
            tags=["citeflow", tag(topic.name)],
            parameters=topic.parameters(),
            concurrency_limit=1,  # runs of one topic never overlap
            schedules=[Cron(topic.cron, timezone=topic.timezone)],
        )
        for topic in topics
    ]


def refuse_work_pool_deployments(topics: list[Topic]) -> None:
    """InputError naming the first topic a work pool already serves."""
    with get_client(sync_client=True) as client:
        for topic in topics:
            try:
                deployment = client.read_deployment_by_name(f"{FLOW_NAME}/{topic.name}")
            except ObjectNotFound:
                continue
            if deployment.work_pool_name:
                raise InputError(
                    f"topic {topic.name}",
                    f"is deployed to work pool {deployment.work_pool_name}, whose worker runs it; serving it "
                    f"too would run it twice. Keep the worker, or delete the deployment first (prefect "
                    f"deployment delete {FLOW_NAME}/{topic.name})",
                    "nothing is served",
                )


def main() -> None:
    try:
        topics = load_topics(Path.cwd() / "deployments" / "topics.yaml")
        if not topics:
            raise InputError("deployments/topics.yaml", "holds no topics; add one with `citeflow topics add`")
        refuse_work_pool_deployments(topics)
    except CiteflowError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    serve(*runner_deployments(topics))


if __name__ == "__main__":
    main()
