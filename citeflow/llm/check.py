"""`citeflow models check`: one call per configured (endpoint, model, key), and a verdict per role.

Roles sharing an endpoint and model share one call; each role's line names the role and its model, and
what works: the reply format the endpoint accepted and the name it takes for the output-token limit.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from enum import StrEnum

from pydantic import BaseModel

from citeflow.errors import ModelError
from citeflow.llm import prompts
from citeflow.llm.budget import Budget, MemoryCallLog
from citeflow.llm.client import NO_KEY, EndpointPool, RoleClient, public_url
from citeflow.llm.settings import ModelSettings, RoleConfig, RoleName

CHECK_RUN_ID = "models-check"
# The check is one call per endpoint, outside any run: no run budget applies to it.
CHECK_TOKEN_LIMIT = 1_000_000


class CheckStatus(StrEnum):
    ok = "ok"
    failed = "failed"
    not_configured = "not_configured"


class RoleCheck(BaseModel):
    role: str
    status: CheckStatus
    model: str = ""
    endpoint: str = ""
    reply_format: str = ""  # "json_schema" when the endpoint accepted it, else "plain json"
    token_parameter: str = ""  # "max_tokens", or "max_completion_tokens" when it refused max_tokens
    latency_seconds: float | None = None
    detail: str = ""


def check_models(settings: ModelSettings, env: Mapping[str, str] | None = None) -> list[RoleCheck]:
    """Call each distinct (endpoint, model, key) once, with no retries, and report every role."""
    log = MemoryCallLog()
    budget = Budget(log, CHECK_RUN_ID, CHECK_TOKEN_LIMIT)
    pool = EndpointPool(settings.limits, env)
    done: dict[tuple[str, str, str], RoleCheck] = {}
    checks = []
    for role in RoleName:
        config = settings.role(role)
        if config is None:
            checks.append(
                RoleCheck(
                    role=role.value,
                    status=CheckStatus.not_configured,
                    detail="no base URL and model: the extractive engine plays this role",
                )
            )
            continue
        ident = (config.base_url, config.model, config.api_key_env)
        if ident not in done:
            done[ident] = _check_one(role, config, pool, budget, log)
        checks.append(done[ident].model_copy(update={"role": role.value}))
    return checks


def _check_one(
    role: RoleName, config: RoleConfig, pool: EndpointPool, budget: Budget, log: MemoryCallLog
) -> RoleCheck:
    client = RoleClient(role, config.model_copy(update={"max_attempts": 1}), pool, budget, log, CHECK_RUN_ID)
    started = time.monotonic()
    base = RoleCheck(
        role=role.value, status=CheckStatus.failed, model=config.model, endpoint=public_url(config.base_url)
    )
    try:
        client.structured(prompts.ping_messages(), prompts.PingReply)
    except ModelError as exc:
        # The problem alone: the error's subject names this role, and the verdict is shared by others.
        return base.model_copy(
            update={"latency_seconds": round(time.monotonic() - started, 3), "detail": exc.problem}
        )
    return base.model_copy(
        update={
            "status": CheckStatus.ok,
            "reply_format": "json_schema" if pool.accepts_schema(config) else "plain json",
            "token_parameter": pool.token_parameter(config),
            "latency_seconds": round(time.monotonic() - started, 3),
            "detail": f"key from ${config.api_key_env}" if pool.key(config) != NO_KEY else "no key sent",
        }
    )
