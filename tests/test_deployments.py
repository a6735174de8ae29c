"""prefect.yaml's recurring topics, as `python -m deployments.serve` builds them."""

from __future__ import annotations

from citeflow.contracts import Question
from deployments.serve import runner_deployments


def test_every_recurring_topic_is_a_schedule_with_a_valid_question() -> None:
    [deployment] = runner_deployments()

    assert deployment.name == "recurring-topics"
    assert deployment.entrypoint is not None and deployment.entrypoint.endswith("research.py:research_flow")
    assert deployment.parameters == {"search": "local"}
    schedules = {schedule.slug: schedule for schedule in deployment.schedules or []}
    assert set(schedules) == {"duckdb-full-text-search", "quote-verification"}
    for schedule in schedules.values():
        assert schedule.schedule.cron  # type: ignore[union-attr]
        assert Question(text=schedule.parameters["question"]).text
