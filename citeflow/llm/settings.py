"""Which model plays which role, where it lives, and what a run may spend.

Layers, each overriding the one before:
  1. the environment: OPENAI_BASE_URL (endpoint) and CITEFLOW_MODEL (model name) for every core role;
     the key is always read from the variable named by `api_key_env` (OPENAI_API_KEY by default) when a
     client is built, and never stored in settings;
  2. citeflow.toml: [defaults] for every role, then [planner], [verifier], [synthesiser], [critic] and the
     optional [query_writer]; [models] for limits shared by all roles; [prices."<model>"] per model;
  3. overrides from command-line flags, keyed the same way ("defaults", "planner", ..., "models").

A role is configured when it ends up with a base URL; a role with a base URL but no model uses the one
model the endpoint lists at /v1/models (and settings fail, naming CITEFLOW_MODEL and the models offered,
when it lists several or none). An unconfigured role is played by the extractive engine. The query writer
is only configured when its own section or override exists, because it adds a call per run that the
planner can do without.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from citeflow.errors import InputError
from citeflow.llm.discovery import only_model

CONFIG_FILE = Path("citeflow.toml")

M = TypeVar("M", bound=BaseModel)


class RoleName(StrEnum):
    planner = "planner"
    verifier = "verifier"
    synthesiser = "synthesiser"
    critic = "critic"
    query_writer = "query_writer"


CORE_ROLES = (RoleName.planner, RoleName.verifier, RoleName.synthesiser, RoleName.critic)


class RoleConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1, description="Model name as the endpoint knows it.")
    base_url: str = Field(
        min_length=1, description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1"
    )
    api_key_env: str = Field(
        default="OPENAI_API_KEY", description="Name of the variable holding the key (not the key)."
    )
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_output_tokens: int = Field(default=1024, ge=16, le=65_536)
    timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Seconds allowed to connect, and for each read of the reply, counted from when the call "
        "is sent (time queued behind this endpoint's other calls in citeflow does not count). A model served "
        "on a CPU may need 300 or more: it writes about 5-20 tokens a second.",
    )
    max_attempts: int = Field(default=4, ge=1, le=10, description="Attempts per call, counting the first.")
    context_tokens: int = Field(
        default=8192,
        ge=1024,
        description="The model's context window in tokens. Each prompt is sized so that it and "
        "max_output_tokens fit in it: page text is cut into windows for the verifier, and the claims shown "
        "to the synthesiser and critic are limited.",
    )


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_million: float = Field(ge=0, description="Currency units per million prompt tokens.")
    output_per_million: float = Field(ge=0, description="Currency units per million completion tokens.")


class Limits(BaseModel):
    """Limits shared by every role (the [models] section)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_concurrent_per_endpoint: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Calls in flight per base URL; further calls wait in citeflow, where waiting does not "
        "count against their timeout. Default: 1 for an endpoint on this machine (llama.cpp, Ollama and "
        "similar serve one request at a time), 4 for any other.",
    )
    cost_budget: float | None = Field(
        default=None,
        ge=0,
        description="Spend per run, from the [prices] table; a model with no price there counts against the "
        "token budget only, and the report says so.",
    )
    verifier_page_chars: int = Field(
        default=12_000,
        ge=500,
        description="Page text shown to the verifier per call (one window of the page); less when the "
        "verifier's context_tokens need it.",
    )
    verifier_windows_max: int = Field(
        default=3,
        ge=1,
        le=20,
        description="Windows of one page the verifier reads at most, the most relevant to the sub-question "
        "first, until the page's claims cap is reached.",
    )
    store_call_text: bool = Field(
        default=True,
        description="Store each model call's prompt and reply in model_calls (capped by "
        "call_text_max_chars), so `citeflow sql` can show what the model saw and said.",
    )
    call_text_max_chars: int = Field(
        default=20_000,
        ge=200,
        description="Characters of a call's prompt, and of its reply, stored at most (head and tail kept).",
    )
    backoff_seconds: float = Field(
        default=1.0, gt=0, description="Base of the exponential backoff between attempts."
    )
    backoff_max_seconds: float = Field(default=20.0, gt=0, description="Longest wait between attempts.")
    retry_after_max_seconds: float = Field(
        default=60.0, gt=0, description="Longest Retry-After the client honours."
    )


class ModelSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    roles: dict[RoleName, RoleConfig] = Field(default_factory=dict, description="Configured roles only.")
    limits: Limits = Field(default_factory=lambda: Limits())
    prices: dict[str, Price] = Field(default_factory=dict, description="Keyed by model name.")

    def unpriced_models(self) -> list[str]:
        """Configured models with no [prices] entry: under a cost budget they count in tokens only."""
        return sorted({r.model for r in self.roles.values()} - self.prices.keys())

    def role(self, name: RoleName) -> RoleConfig | None:
        return self.roles.get(name)


def load_model_settings(
    path: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> ModelSettings:
    """Merge environment, config file (citeflow.toml when it exists and no path is given) and overrides."""
    env = os.environ if env is None else env
    overrides = overrides or {}
    source = str(path or CONFIG_FILE)
    file = _read_toml(path if path is not None else CONFIG_FILE, required=path is not None)

    base: dict[str, Any] = {}
    if env.get("OPENAI_BASE_URL"):
        base["base_url"] = env["OPENAI_BASE_URL"]
    if env.get("CITEFLOW_MODEL"):
        base["model"] = env["CITEFLOW_MODEL"]
    base |= _section(file, "defaults", source) | dict(overrides.get("defaults", {}))

    roles: dict[RoleName, RoleConfig] = {}
    discovered: dict[str, str] = {}  # base URL -> its one model, asked once per endpoint
    for name in RoleName:
        own = _section(file, name.value, source) | dict(overrides.get(name.value, {}))
        if name is RoleName.query_writer and not own:
            continue
        merged = base | own
        if "base_url" not in merged:
            if own:  # the user asked for this role explicitly, so a missing endpoint is a mistake
                raise InputError(source, f"[{name.value}] has no base_url", "no model was called")
            continue
        if "model" not in merged:
            url = str(merged["base_url"])
            if url not in discovered:
                key_env = str(merged.get("api_key_env", RoleConfig.model_fields["api_key_env"].default))
                discovered[url] = only_model(url, env.get(key_env, ""))
            merged["model"] = discovered[url]
        roles[name] = _validate(RoleConfig, merged, f"{source} [{name.value}]")

    limits = _validate(Limits, _section(file, "models", source) | dict(overrides.get("models", {})), source)
    prices = {
        model: _validate(Price, price, f"{source} [prices.{model}]")
        for model, price in _section(file, "prices", source).items()
    }
    return ModelSettings(roles=roles, limits=limits, prices=prices)


def _read_toml(path: Path, required: bool) -> dict[str, Any]:
    if not path.exists():
        if required:
            raise InputError(str(path), "the config file does not exist", "no model was called")
        return {}
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(path), f"not valid TOML: {exc}", "no model was called") from exc


def _section(file: Mapping[str, Any], name: str, source: str) -> dict[str, Any]:
    value = file.get(name, {})
    if not isinstance(value, dict):
        raise InputError(source, f"[{name}] must be a table", "no model was called")
    return dict(value)


def _validate(model: type[M], data: Mapping[str, Any], where: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InputError(where, problems, "no model was called") from exc
