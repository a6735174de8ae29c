"""At the default settings the flow sends every page's verification to a hosted model at once: the task
runner's pool is no limit, and a remote endpoint's slots (models.max_concurrent_per_endpoint, by default
REMOTE_CONCURRENCY) are as many as the pages a run verifies by default. An endpoint on this machine gets
one slot by default (test_llm_client.py); the scripted one here is told it serves many."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from role_server import PLAN, QUESTION, RoleServer, ingested, models_for

from citeflow.config import Caps
from citeflow.contracts import Report
from citeflow.llm.client import REMOTE_CONCURRENCY
from citeflow.llm.settings import Limits
from flows.research import TASK_WORKERS


def test_the_default_limits_verify_every_page_in_one_round() -> None:
    assert Caps().pages_verified_max <= REMOTE_CONCURRENCY
    most_slots = Limits.model_fields["max_concurrent_per_endpoint"].metadata[1].le
    assert most_slots <= TASK_WORKERS


# Each reply takes this long: a verification sent after another's reply came started a second round.
# Long enough that verifications started a few seconds apart by a loaded Prefect server still overlap
# (in CI one started 2.2 s after another); a limit of 4 slots still caps them at 4 in flight, whatever it is.
DELAY = 5.0


@pytest.fixture
def slow_server() -> Iterator[RoleServer]:
    with RoleServer(delay=DELAY) as server:
        yield server


def test_every_page_is_verified_at_the_same_time(
    prefect_api: None, slow_server: RoleServer, tmp_path: Path
) -> None:
    from flows.research import research_flow

    # Four pages for each sub-question's query: eight verifications, more than the old pool of four.
    founding = "Acme Corp was founded by Jane Doe in 1947; this is part {n} of its founding history."
    products = "Acme Corp products include anvils and rockets; this is part {n} of its products catalogue."
    pages = [
        {"url": f"https://example.org/{kind}-{n}", "title": f"Acme Corp {kind} {n}", "text": text.format(n=n)}
        for kind, text in [("history", founding), ("products", products)]
        for n in range(4)
    ]
    db = ingested(tmp_path, pages)
    settings = {"db": str(db), "reports": str(tmp_path / "reports"), **models_for(slow_server)}
    settings["models.max_concurrent_per_endpoint"] = REMOTE_CONCURRENCY
    settings["caps.followups_max"] = 0  # one research round: a second one is verified after the first
    state = research_flow(question=QUESTION, settings=settings, return_state=True)
    report = state.result(raise_on_failure=False)
    assert isinstance(report, Report), state.message
    verifier_calls = slow_server.of("verifier")
    # Every page is read for its best sub-question, and one for the question itself as well.
    assert len(verifier_calls) >= len(pages) == 4 * len(PLAN["subquestions"])
    # Counted as requests in flight at once, not as the spread of their start times, which a loaded
    # Prefect server (on SQLite here) stretches by seconds.
    assert slow_server.max_in_flight >= len(pages), "verifications waited for other ones' replies"
