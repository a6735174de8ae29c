"""One settings object for a run: where things live, which search, and the caps.

Caps live here, in code, and every stage enforces them; no prompt is trusted to.
Environment variables CITEFLOW_DB, CITEFLOW_REPORTS, CITEFLOW_SEARCH and CITEFLOW_CAPS__<CAP> override the
defaults, and command-line flags override those.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Caps(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    subquestions_min: int = Field(3, ge=1, description="The planner aims for at least this many.")
    subquestions_max: int = Field(5, ge=1, le=10, description="Sub-questions beyond this are dropped.")
    followups_max: int = Field(
        5, ge=0, le=5, description="Follow-up sub-questions of the second research round; 0 turns it off."
    )
    pages_per_search: int = Field(4, ge=1, le=20, description="Search results read per sub-question.")
    pages_verified_max: int = Field(
        16, ge=1, description="Distinct pages whose claims a research round verifies (each of the two)."
    )
    claims_per_page: int = Field(3, ge=1, le=20, description="Claims proposed from one page.")
    revisions_max: int = Field(2, ge=0, le=2, description="Synthesiser revisions after a critique.")
    token_budget: int = Field(200_000, ge=0, description="Model tokens (prompt + completion) per run.")
    quote_min_chars: int = Field(20, ge=1, description="Shorter quotes are rejected: they prove nothing.")
    page_text_max_chars: int = Field(
        200_000, ge=1000, description="Page text beyond this is cut before storing."
    )


class Settings(BaseSettings):
    # Caps from the environment too, e.g. CITEFLOW_CAPS__TOKEN_BUDGET=50000.
    model_config = SettingsConfigDict(
        env_prefix="CITEFLOW_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    db: Path = Field(Path("citeflow.duckdb"), description="The evidence store (DuckDB file).")
    reports: Path = Field(Path("reports"), description="Folder where finished reports are written.")
    search: str = Field(
        "local",
        description="Search providers, first tried first, comma-separated: 'local' searches the evidence "
        "store; a recurring topic's schedule may choose its own, e.g. 'wikipedia,local'.",
    )
    caps: Caps = Field(default_factory=lambda: Caps())
