"""`citeflow models check`: one call per configured endpoint, a verdict per role."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai_server import Reply, ScriptedServer, json_reply

from citeflow.llm.check import CheckStatus, check_models
from citeflow.llm.settings import ModelSettings, RoleConfig, RoleName

KEY = "sk-check-secret-abcdef0123456789"


@pytest.fixture
def good() -> Iterator[ScriptedServer]:
    with ScriptedServer() as running:
        yield running


@pytest.fixture
def bad() -> Iterator[ScriptedServer]:
    with ScriptedServer() as running:
        yield running


def test_check_reports_each_role(good: ScriptedServer, bad: ScriptedServer) -> None:
    shared = RoleConfig(model="small", base_url=good.url)
    settings = ModelSettings(
        roles={
            RoleName.planner: shared,
            RoleName.synthesiser: shared,
            RoleName.verifier: RoleConfig(model="strong", base_url=bad.url, api_key_env="STRONG_KEY"),
        }
    )
    good.enqueue(Reply(status=422, error="response_format unsupported"), json_reply({"ok": True}))
    bad.default = Reply(status=401, error=f"Incorrect API key provided: {KEY}")
    checks = {c.role: c for c in check_models(settings, {"OPENAI_API_KEY": "sk-other", "STRONG_KEY": KEY})}

    assert len(good.requests) == 2  # planner and synthesiser share one check (with the format fallback)
    assert len(bad.requests) == 1  # no retry: the check calls once
    for role in ("planner", "synthesiser"):
        assert (checks[role].status, checks[role].reply_format, checks[role].model) == (
            CheckStatus.ok,
            "plain json",
            "small",
        )
        assert checks[role].detail == "key from $OPENAI_API_KEY"
        assert checks[role].token_parameter == "max_tokens"
    verifier = checks["verifier"]
    assert verifier.status is CheckStatus.failed
    assert verifier.detail.startswith("HTTP 401") and (verifier.model, verifier.endpoint) == (
        "strong",
        bad.url,
    )
    assert KEY not in verifier.model_dump_json()
    assert {checks[r].status for r in ("critic", "query_writer")} == {CheckStatus.not_configured}


def test_a_shared_failure_names_no_other_role(good: ScriptedServer) -> None:
    shared = RoleConfig(model="small", base_url=good.url)
    settings = ModelSettings(roles={RoleName.planner: shared, RoleName.critic: shared})
    good.default = Reply(status=404, error="model 'small' not found")
    checks = {c.role: c for c in check_models(settings, {})}
    assert len(good.requests) == 1
    for role in ("planner", "critic"):
        assert checks[role].status is CheckStatus.failed and checks[role].model == "small"
        assert "planner" not in checks[role].detail and "HTTP 404" in checks[role].detail


def test_check_says_which_token_limit_the_endpoint_takes() -> None:
    with ScriptedServer(refuses="max_tokens") as server:
        server.default = json_reply({"ok": True})
        settings = ModelSettings(roles={RoleName.verifier: RoleConfig(model="o-mini", base_url=server.url)})
        (check,) = [c for c in check_models(settings, {}) if c.role == "verifier"]
    assert (check.status, check.token_parameter) == (CheckStatus.ok, "max_completion_tokens")
