"""Result caching across runs: a repeated run of an unchanged question makes no model call and its task
runs show as Cached in Prefect; a change of model, caps or page content misses as it must; a fallback
caused by what the model replied is cached and still reported, one caused by a transient failure is
not; --refresh recomputes. Every role is on a scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_server import Reply
from role_server import PAGES, QUESTION, RoleServer, failing_checks_on, ingested, models_for

from citeflow.contracts import Report
from storage.ingest import ingest_paths
from storage.store import get_store
from tasks.audit import audit


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RoleServer]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-cache-test")
    with RoleServer() as running:
        yield running


def run(server: RoleServer, db: Path, tmp_path: Path, refresh: bool = False, **settings: Any) -> Report:
    from flows.research import research_flow

    chosen = {"db": str(db), "reports": str(tmp_path / "reports"), **models_for(server), **settings}
    state = research_flow(question=QUESTION, settings=chosen, refresh=refresh, return_state=True)
    report = state.result(raise_on_failure=False)  # a run may fail: its report says why
    assert isinstance(report, Report), state.message
    return report


def calls_during(server: RoleServer, body: Any) -> tuple[Any, dict[str, int]]:
    """What `body()` returned, and the model requests it made, per role."""
    before = dict(server.calls)
    result = body()
    return result, {
        role: n - before.get(role, 0) for role, n in server.calls.items() if n > before.get(role, 0)
    }


async def task_run_states(run_id: str) -> dict[str, str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async with get_client() as client:
        runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
    return {task_run.name: task_run.state.name for task_run in runs if task_run.state}


TRACED = {"plan", "research", "verify", "follow"}  # the tasks the flow settles (flows/research.py)


def test_a_repeated_run_makes_no_model_call_and_its_tasks_show_as_cached(
    prefect_api: None, server: RoleServer, tmp_path: Path
) -> None:
    db = ingested(tmp_path, PAGES)

    first, first_calls = calls_during(server, lambda: run(server, db, tmp_path))
    second, second_calls = calls_during(server, lambda: run(server, db, tmp_path))

    assert set(first_calls) == {"planner", "follow-up", "verifier", "synthesiser", "critic"}
    assert second_calls == {}  # at most 10% of the first run's calls was asked: none were needed
    assert [s.text for s in second.sentences] == [s.text for s in first.sentences] and second.sentences
    store = get_store(db)
    assert audit(store, second) == []
    assert store.role_usage(second.run_id) == {}
    assert len(store.claims(second.run_id)) == len(store.claims(first.run_id))
    states = asyncio.run(task_run_states(second.run_id))
    stages = {name.rsplit("-", 1)[0] for name in states}
    assert {"plan", "research", "verify", "synthesise", "critique", "finish"} <= stages
    assert all(state == "Cached" for name, state in states.items() if not name.startswith("finish"))
    cached_traces = store.query(
        f"SELECT count(*) FROM traces WHERE run_id = '{second.run_id}' AND actor = 'cache'"
    )[1][0][0]
    # Each reused plan, research, verification and follow-up is a trace row saying so.
    reused = [name for name, state in states.items() if state == "Cached" and name.split("-")[0] in TRACED]
    assert cached_traces == len(reused) > 0


def test_a_change_of_model_or_caps_misses_and_refresh_recomputes(
    prefect_api: None, server: RoleServer, tmp_path: Path
) -> None:
    db = ingested(tmp_path, PAGES)
    # One research round, so that every run verifies the same pages (follow-ups read the claims).
    one_round = {"caps.followups_max": 0}
    _, first = calls_during(server, lambda: run(server, db, tmp_path, **one_round))

    _, other_model = calls_during(
        server, lambda: run(server, db, tmp_path, **one_round, **{"defaults.model": "another"})
    )
    _, fewer_claims = calls_during(
        server, lambda: run(server, db, tmp_path, **one_round, **{"caps.claims_per_page": 1})
    )
    _, refreshed = calls_during(server, lambda: run(server, db, tmp_path, refresh=True, **one_round))

    assert other_model == first  # every role asked again
    assert set(fewer_claims) == {"verifier", "synthesiser", "critic"}  # the plan does not depend on it
    assert fewer_claims["verifier"] == first["verifier"]
    assert refreshed == first


def test_a_changed_page_is_the_only_one_verified_again(
    prefect_api: None, server: RoleServer, tmp_path: Path
) -> None:
    db = ingested(tmp_path, PAGES)
    # One research round: follow-ups read the changed claims, so they may ask new questions of any page.
    one_round = {"caps.followups_max": 0}
    _, first = calls_during(server, lambda: run(server, db, tmp_path, **one_round))
    text = PAGES[0]["text"].replace("by Jane Doe", "by Jane Doe and John Roe")
    changed = [{**PAGES[0], "text": text}, PAGES[1]]
    corpus = tmp_path / "changed.jsonl"
    corpus.write_text("".join(json.dumps(page) + "\n" for page in changed), encoding="utf-8")
    ingest_paths(get_store(db), [corpus])

    report, second = calls_during(server, lambda: run(server, db, tmp_path, **one_round))

    assert "planner" not in second  # the question and the plan's inputs did not change
    # Each sub-question read the changed page once; the unchanged page's verdicts were reused.
    assert 0 < second["verifier"] < first["verifier"]
    assert any("John Roe" in claim.quote for claim in report.claims)


def fallback_rows(db: Path, run_id: str) -> list[str]:
    return [
        row[0]
        for row in get_store(db).query(
            f"SELECT detail FROM errors WHERE run_id = '{run_id}' AND stage LIKE '%:fallback'"
        )[1]
    ]


def test_a_fallback_from_what_the_model_replied_is_cached_and_still_reported(
    prefect_api: None, server: RoleServer, tmp_path: Path
) -> None:
    db = ingested(tmp_path, PAGES)
    # Well-formed replies whose claims fail the checks for the products page: a property of (model,
    # prompt, page), so the page's extractive fallback is as reusable as a verified reply.
    server.handlers["verifier"] = failing_checks_on("rockets")

    first, first_calls = calls_during(server, lambda: run(server, db, tmp_path))
    second, second_calls = calls_during(server, lambda: run(server, db, tmp_path))

    first_fallbacks = fallback_rows(db, first.run_id)
    assert first_calls["verifier"] > 0 and any("failed the checks" in row for row in first_fallbacks)
    assert second_calls == {}
    states = asyncio.run(task_run_states(second.run_id))
    assert all(state == "Cached" for name, state in states.items() if not name.startswith("finish"))
    # The reused result says it fell back, in the report as in the metrics; its error rows are the
    # computing run's, recorded once.
    assert second.caveats == first.caveats and any("verifier" in c for c in second.caveats)
    assert second.metrics.degradations == first.metrics.degradations > 0
    assert fallback_rows(db, second.run_id) == []
    assert [s.text for s in second.sentences] == [s.text for s in first.sentences]


def test_a_transient_failure_is_not_cached_so_the_next_run_asks_the_model_again(
    prefect_api: None, server: RoleServer, tmp_path: Path
) -> None:
    db = ingested(tmp_path, PAGES)
    faithful = server.handlers["verifier"]
    server.handlers["verifier"] = lambda received, n: Reply(status=503, error="overloaded")
    _, degraded = calls_during(server, lambda: run(server, db, tmp_path))
    server.handlers["verifier"] = faithful

    report, second = calls_during(server, lambda: run(server, db, tmp_path))

    assert degraded["verifier"] > 0 and second["verifier"] > 0
    assert "planner" not in second  # the plan was fine, and cached
    assert not any("verifier" in caveat for caveat in report.caveats)
    assert report.claims


def test_a_stage_s_code_version_covers_what_it_calls_and_not_the_other_stages() -> None:
    from tasks.caching import code_version, stage_sources

    verifier = stage_sources("tasks.verifier")
    # Its own checks and prompts count; the writer's code does not, so editing it keeps every page's
    # verification cached.
    assert {"tasks.verifier", "citeflow.verify", "citeflow.llm.prompts", "citeflow.roles"} <= verifier.keys()
    assert "tasks.writer" not in verifier and "tasks.planner" not in verifier
    assert "citeflow.checks" in stage_sources("tasks.writer")
    assert code_version("tasks.verifier") != code_version("tasks.writer")


def cached_results_since(started: float) -> list[Any]:
    """The values of every stage result cached since `started` (epoch seconds), read back as Prefect reads
    them from its result storage."""
    from prefect._internal.result_records import ResultRecord
    from prefect.settings import get_current_settings

    folder = Path(get_current_settings().results.local_storage_path)
    return [
        ResultRecord.deserialize(path.read_bytes()).result
        for path in folder.glob("citeflow-*")
        if path.stat().st_mtime >= started
    ]


def test_two_runs_sharing_cached_stages_each_record_their_own_run_ids(
    prefect_api: None, server: RoleServer, tmp_path: Path
) -> None:
    db = ingested(tmp_path, PAGES)
    started = time.time()
    first = run(server, db, tmp_path)
    second, calls = calls_during(server, lambda: run(server, db, tmp_path))
    assert calls == {}  # every stage of the second run was reused from the first

    # What is cached is what a stage computed: no result names the run that computed it.
    results = cached_results_since(started)
    assert results  # plan, research, verify, follow-up, synthesise and critique results
    assert not [result for result in results if first.run_id in repr(result)]

    # Each run's rows carry its own id: the reused claims, pages read and search results are the second
    # run's as much as the computed ones are the first's.
    store = get_store(db)
    for table in ("claims", "run_sources", "search_results", "subquestions"):
        rows = dict(store.query(f"SELECT run_id, count(*) FROM {table} GROUP BY run_id")[1])
        assert rows.get(first.run_id, 0) == rows.get(second.run_id, 0) > 0, table
    assert [c.model_dump() for c in store.claims(second.run_id)] == [
        c.model_dump() for c in store.claims(first.run_id)
    ]
