"""Which model plays which role, where it lives, and what a run may spend.

These are the model sections of the settings tree (citeflow/config.py loads them, with every other
setting, from defaults, citeflow.toml, the environment and flags): a role's resolved RoleConfig, the
limits every role shares ([models]) and the price of each model ([prices."<model>"]).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


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
        "similar serve one request at a time), 16 for any other (the pages a run verifies by default, in "
        "one round of calls).",
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
