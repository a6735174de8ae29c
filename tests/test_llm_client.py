"""The client layer against a scripted OpenAI-compatible server on 127.0.0.1, through the real client."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai_server import Reply, ScriptedServer, json_reply

from citeflow.contracts import Outcome
from citeflow.llm.budget import Budget, MemoryCallLog
from citeflow.llm.client import EndpointPool, RoleClient, retry_after_seconds
from citeflow.llm.errors import BudgetExhausted, ContextTooSmall, ModelRejected, ModelUnavailable
from citeflow.llm.prompts import PlanReply
from citeflow.llm.settings import Limits, RoleConfig, RoleName
from storage.store import EvidenceStore

PLAN = {"subquestions": [{"text": "Who founded Acme?", "query": "Acme founder"}]}
ASK = [{"role": "user", "content": "Plan: who founded Acme?"}]
FAST = Limits(backoff_seconds=0.01, backoff_max_seconds=0.05)
KEY = "sk-test-secret-0123456789abcdef"


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as running:
        yield running


def make_client(
    server: ScriptedServer,
    log: MemoryCallLog | EvidenceStore | None = None,
    token_limit: int = 200_000,
    limits: Limits = FAST,
    **config: object,
) -> RoleClient:
    log = log if log is not None else MemoryCallLog()
    role_config = RoleConfig.model_validate({"model": "test-model", "base_url": server.url} | config)
    pool = EndpointPool(limits, {"OPENAI_API_KEY": KEY})
    return RoleClient(RoleName.planner, role_config, pool, Budget(log, "r1", token_limit), log, "r1")


def test_json_schema_response_format_is_sent(server: ScriptedServer) -> None:
    server.enqueue(json_reply(PLAN))
    plan = make_client(server).structured(ASK, PlanReply)
    assert plan.subquestions[0].query == "Acme founder"
    sent = server.requests[0].body
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["name"] == "PlanReply"
    assert sent["model"] == "test-model" and sent["max_tokens"] == 1024
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_endpoint_rejecting_response_format_gets_plain_json(server: ScriptedServer) -> None:
    server.enqueue(
        Reply(status=400, error="'response_format.type' must be 'text' or 'json_object'"),
        Reply(content=f"<think>ok</think>```json\n{json.dumps(PLAN)}\n```"),
        json_reply(PLAN),
    )
    client = make_client(server)
    assert client.structured(ASK, PlanReply).subquestions[0].text == "Who founded Acme?"
    assert client.structured(ASK, PlanReply).subquestions[0].text == "Who founded Acme?"
    formats = [r.body.get("response_format", {}).get("type") for r in server.requests]
    assert formats == ["json_schema", None, None]  # the refusal is remembered for the endpoint


def test_429_with_retry_after_is_honoured(server: ScriptedServer) -> None:
    log = MemoryCallLog()
    server.enqueue(Reply(status=429, error="slow down", headers={"Retry-After": "1"}), json_reply(PLAN))
    make_client(server, log).structured(ASK, PlanReply)
    first, second = server.requests
    assert second.at - first.at >= 0.95  # the backoff alone would wait at most 0.05 s
    assert [(c.attempt, c.outcome, c.detail) for c in log.calls] == [
        (1, Outcome.failed, "json_schema; HTTP 429"),
        (2, Outcome.ok, "json_schema"),
    ]


def test_negative_retry_after_ms_waits_zero(server: ScriptedServer) -> None:
    assert retry_after_seconds({"retry-after-ms": "-500"}) == 0.0
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    # through the real client: a negative wait would make tenacity's sleep raise instead of retrying
    server.enqueue(Reply(status=429, error="slow down", headers={"retry-after-ms": "-500"}), json_reply(PLAN))
    assert make_client(server).structured(ASK, PlanReply).subquestions[0].query == "Acme founder"
    assert len(server.requests) == 2


def test_500_storm_stops_at_the_attempt_bound(server: ScriptedServer) -> None:
    log = MemoryCallLog()
    server.default = Reply(status=500, error="overloaded")
    with pytest.raises(ModelUnavailable, match="3 attempt\\(s\\) failed, the last with HTTP 500"):
        make_client(server, log, max_attempts=3).structured(ASK, PlanReply)
    assert len(server.requests) == 3
    assert [c.attempt for c in log.calls] == [1, 2, 3]
    assert {c.outcome for c in log.calls} == {Outcome.failed}


def test_reply_slower_than_the_timeout(server: ScriptedServer) -> None:
    server.enqueue(Reply(content="{}", delay=1.5), Reply(content="{}", delay=1.5))
    started = time.monotonic()
    with pytest.raises(ModelUnavailable, match="no reply within 0.3 s"):
        make_client(server, timeout_seconds=0.3, max_attempts=2).structured(ASK, PlanReply)
    assert time.monotonic() - started < 1.5  # gave up on both without waiting for either reply
    assert len(server.requests) == 2


def test_slow_then_fast_reply_succeeds_on_retry(server: ScriptedServer) -> None:
    log = MemoryCallLog()
    # The slow reply is invalid too, so only the timeout (not a validation retry) may explain attempt 2.
    server.enqueue(Reply(content="{}", delay=1.0), json_reply(PLAN))
    plan = make_client(server, log, timeout_seconds=0.3, max_attempts=2).structured(ASK, PlanReply)
    assert plan.subquestions[0].query == "Acme founder"
    assert [(c.attempt, c.outcome, c.detail) for c in log.calls] == [
        (1, Outcome.failed, "json_schema; no reply within 0.3 s"),
        (2, Outcome.ok, "json_schema"),
    ]
    first, second = server.requests
    assert len(second.body["messages"]) == len(first.body["messages"])  # a resend, not a validation retry


def test_dropped_connection_is_retried(server: ScriptedServer) -> None:
    log = MemoryCallLog()
    server.enqueue(Reply(drop=True), json_reply(PLAN))
    make_client(server, log).structured(ASK, PlanReply)
    assert [(c.outcome, c.detail) for c in log.calls] == [
        (Outcome.failed, "json_schema; connection failed or dropped"),
        (Outcome.ok, "json_schema"),
    ]


def test_usage_is_summed_exactly_from_the_server_figures(server: ScriptedServer, tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "calls.duckdb")
    try:
        server.enqueue(
            json_reply(PLAN, usage=(1234, 56)),
            json_reply(PLAN, usage=(789, 10)),
            json_reply(PLAN, usage=(5, 3001)),
        )
        client = make_client(server, store)
        for _ in range(3):
            client.structured(ASK, PlanReply)
        assert store.run_tokens("r1") == (1234 + 789 + 5, 56 + 10 + 3001)
    finally:
        store.close()


def test_missing_usage_is_estimated_and_marked(server: ScriptedServer) -> None:
    log = MemoryCallLog()
    server.enqueue(json_reply(PLAN, usage=None))
    make_client(server, log).structured(ASK, PlanReply)
    (call,) = log.calls
    assert call.tokens_estimated
    assert call.prompt_tokens > 0 and call.completion_tokens > 0


@pytest.mark.parametrize("status", [401, 403, 404])
def test_refusal_fails_fast_naming_role_endpoint_model_not_key(
    server: ScriptedServer, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    log = MemoryCallLog()
    server.default = Reply(status=status, error=f"Incorrect API key provided: {KEY}")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ModelRejected) as caught:
        make_client(server, log, max_attempts=4).structured(ASK, PlanReply)
    message = str(caught.value)
    assert len(server.requests) == 1
    assert caught.value.status == status
    assert f"planner model test-model at {server.url}" in message and f"HTTP {status}" in message
    assert KEY not in message
    assert KEY not in caplog.text
    assert all(KEY not in call.model_dump_json() for call in log.calls)


def test_400_without_response_format_too_fails_fast(server: ScriptedServer) -> None:
    server.default = Reply(status=400, error="context length exceeded")
    with pytest.raises(ModelRejected, match="HTTP 400.*context length exceeded"):
        make_client(server, max_attempts=4).structured(ASK, PlanReply)
    assert [r.body.get("response_format", {}).get("type") for r in server.requests] == ["json_schema", None]


def test_invalid_reply_is_retried_once_with_the_exact_error(server: ScriptedServer) -> None:
    server.enqueue(json_reply({"subquestions": [{"query": "Acme founder"}]}), json_reply(PLAN))
    make_client(server).structured(ASK, PlanReply)
    retry = server.requests[1].body["messages"]
    assert retry[-2] == {"role": "assistant", "content": '{"subquestions": [{"query": "Acme founder"}]}'}
    assert "subquestions.0.text\n  Field required" in retry[-1]["content"]


def test_concurrent_calls_per_endpoint_are_capped(server: ScriptedServer) -> None:
    server.default = json_reply(PLAN, delay=0.3)
    client = make_client(server, limits=Limits(max_concurrent_per_endpoint=2))
    threads = [threading.Thread(target=client.structured, args=(ASK, PlanReply)) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(server.requests) == 5
    assert server.max_in_flight == 2


def test_call_past_the_budget_is_not_made(server: ScriptedServer) -> None:
    log = MemoryCallLog()
    server.default = json_reply(PLAN, usage=(60, 7))
    client = make_client(server, log, token_limit=1100, max_output_tokens=1024)
    # the prompt is estimated at 10 tokens: 10 + 1024 fits in 1100 once, not after 67 tokens are spent
    client.structured(ASK, PlanReply)
    with pytest.raises(BudgetExhausted, match="needs up to 1,034 tokens and 67 of the 1,100 token budget"):
        client.structured(ASK, PlanReply)
    assert len(server.requests) == 1
    assert [(c.outcome, c.prompt_tokens, c.completion_tokens) for c in log.calls] == [
        (Outcome.ok, 60, 7),
        (Outcome.skipped, 0, 0),
    ]


@pytest.mark.parametrize(
    ("refused", "taken"), [("max_tokens", "max_completion_tokens"), ("max_completion_tokens", "max_tokens")]
)
def test_a_refused_token_limit_is_retried_with_the_other_name_and_remembered(
    refused: str, taken: str
) -> None:
    log = MemoryCallLog()
    with ScriptedServer(refuses=refused) as server:
        server.default = json_reply(PLAN)
        client = make_client(server, log)
        if refused == "max_completion_tokens":  # a remembered choice, as for an endpoint refusing the other
            client.pool.takes_token_parameter(client.config, refused)
        client.structured(ASK, PlanReply)
        client.structured(ASK, PlanReply)
    sent = [
        [name for name in ("max_tokens", "max_completion_tokens") if name in r.body] for r in server.requests
    ]
    assert sent == [[refused], [taken], [taken]]  # refused once, then the other name for good
    assert server.requests[1].body[taken] == 1024
    assert [c.outcome for c in log.calls] == [Outcome.failed, Outcome.ok, Outcome.ok]


def test_a_400_about_the_token_limits_value_is_not_a_refusal_of_its_name(server: ScriptedServer) -> None:
    server.default = Reply(status=400, error="max_tokens must be at most 512 for this model")
    with pytest.raises(ModelRejected, match="max_tokens must be at most 512"):
        make_client(server).structured(ASK, PlanReply)
    assert all("max_completion_tokens" not in r.body for r in server.requests)


def test_a_one_at_a_time_server_never_times_out_queued_calls() -> None:
    # Each reply takes 0.4 s and the timeout is 1 s: five calls at once would wait up to 2 s at the
    # server. Citeflow holds them instead (1 in flight for an endpoint on this machine), so none times out.
    with ScriptedServer(serial=True) as server:
        server.default = json_reply(PLAN, delay=0.4)
        client = make_client(server, timeout_seconds=1.0, max_attempts=1)
        assert client.pool.concurrency(client.config) == 1
        errors: list[BaseException] = []

        def call() -> None:
            try:
                client.structured(ASK, PlanReply)
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion below
                errors.append(exc)

        threads = [threading.Thread(target=call) for _ in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == [] and len(server.requests) == 5
    assert server.max_connected == 1


def test_four_calls_in_flight_against_a_one_at_a_time_server_time_out() -> None:
    # The failure the cap prevents: with 4 in flight, the last queued call waits past its timeout.
    with ScriptedServer(serial=True) as server:
        server.default = json_reply(PLAN, delay=0.4)
        client = make_client(
            server, limits=Limits(max_concurrent_per_endpoint=4), timeout_seconds=1.0, max_attempts=1
        )
        outcomes: list[str] = []
        threads = [threading.Thread(target=lambda: outcomes.append(_outcome(client))) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert "timed out" in outcomes


def _outcome(client: RoleClient) -> str:
    try:
        client.structured(ASK, PlanReply)
    except ModelUnavailable:
        return "timed out"
    return "ok"


def test_a_remote_endpoint_gets_sixteen_calls_in_flight() -> None:
    pool = EndpointPool(Limits(), {})
    assert pool.concurrency(RoleConfig(model="m", base_url="https://api.example.com/v1")) == 16
    assert pool.concurrency(RoleConfig(model="m", base_url="http://localhost:11434/v1")) == 1
    assert (
        EndpointPool(Limits(max_concurrent_per_endpoint=2), {}).concurrency(
            RoleConfig(model="m", base_url="http://127.0.0.1:8080/v1")
        )
        == 2
    )


def test_a_prompt_too_big_for_the_context_window_is_not_sent(server: ScriptedServer) -> None:
    log = MemoryCallLog()
    big = [{"role": "user", "content": "word " * 2000}]  # about 3,300 tokens by the context estimate
    with pytest.raises(ContextTooSmall, match="may not fit its 4,096-token context window"):
        make_client(server, log, context_tokens=4096, max_output_tokens=1024).structured(big, PlanReply)
    assert server.requests == []
    (skipped,) = log.calls  # the call not made is a row that says how big its prompt was
    assert skipped.outcome is Outcome.skipped and skipped.detail.startswith("the prompt (about 3,3")


def test_each_call_stores_its_prompt_and_reply_capped(server: ScriptedServer) -> None:
    log = MemoryCallLog()
    server.enqueue(Reply(content="not json " * 100), json_reply(PLAN))
    make_client(server, log, limits=Limits(call_text_max_chars=300)).structured(ASK, PlanReply)
    first, second = log.calls
    assert first.prompt.startswith("user: Plan: who founded Acme?") and len(first.prompt) <= 300
    assert first.reply.startswith("not json not json") and len(first.reply) <= 300
    assert "characters not stored" in first.reply
    assert second.prompt.endswith("Reply again with one JSON object only that fixes this error.")
    assert second.reply == json.dumps(PLAN)


def test_call_text_is_not_stored_when_turned_off(server: ScriptedServer) -> None:
    log = MemoryCallLog()
    server.enqueue(json_reply(PLAN))
    make_client(server, log, limits=Limits(store_call_text=False)).structured(ASK, PlanReply)
    (call,) = log.calls
    assert (call.prompt, call.reply) == ("", "")
