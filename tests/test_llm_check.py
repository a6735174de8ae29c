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
    verifier = checks["verifier"]
    assert verifier.status is CheckStatus.failed
    assert f"verifier model strong at {bad.url}: HTTP 401" in verifier.detail
    assert KEY not in verifier.model_dump_json()
    assert {checks[r].status for r in ("critic", "query_writer")} == {CheckStatus.not_configured}
