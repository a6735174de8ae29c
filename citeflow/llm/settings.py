"""Which model plays which role, where it lives, and what a run may spend.

These are the model sections of the settings tree (citeflow/config.py loads them, with every other
setting, from defaults, citeflow.toml, the environment and flags): a role's resolved RoleConfig, the
limits every role shares ([models]) and the price of each model ([prices."<model>"]).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from citeflow.errors import InputError


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
        default=60.0, gt=0, description="Seconds allowed to connect, and for each read of the reply."
    )
    max_attempts: int = Field(default=4, ge=1, le=10, description="Attempts per call, counting the first.")


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_million: float = Field(ge=0, description="Currency units per million prompt tokens.")
    output_per_million: float = Field(ge=0, description="Currency units per million completion tokens.")


class Limits(BaseModel):
    """Limits shared by every role (the [models] section)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # 16, the default caps.pages_verified_max: a run's pages are verified in one round of model calls.
    max_concurrent_per_endpoint: int = Field(
        default=16,
        ge=1,
        le=64,
        description="Calls in flight per base URL. A local server with fewer parallel slots queues the rest "
        "itself; set its slot count if queued calls come near timeout_seconds.",
    )
    cost_budget: float | None = Field(
        default=None, ge=0, description="Spend per run; needs a price for each model."
    )
    verifier_page_chars: int = Field(
        default=12_000, ge=500, description="Page text shown to the verifier per call."
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

    @model_validator(mode="after")
    def cost_budget_has_prices(self) -> ModelSettings:
        """A cost budget without a price for every configured model could not hold, so settings with one
        are refused here, before any run. InputError (not ValueError) so that pydantic lets it through
        unwrapped, as the one clear line the command line prints."""
        if self.limits.cost_budget is not None:
            unpriced = sorted({r.model for r in self.roles.values()} - self.prices.keys())
            if unpriced:
                raise InputError(
                    "[models] cost_budget",
                    f"no [prices] entry for {', '.join(unpriced)}",
                    "no model was called",
                )
        return self

    def role(self, name: RoleName) -> RoleConfig | None:
        return self.roles.get(name)
