"""How the evidence store shares its file and bounds user SQL: one settings model, nested in the settings
tree (environment CITEFLOW_STORE__<FIELD>, e.g. CITEFLOW_STORE__WAIT_SECONDS=120)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# DuckDB's own spelling of a memory size, checked here so a typo is one clear line, not a DuckDB error.
MEMORY_SIZE = r"^\s*\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$"


class StoreSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    wait_seconds: float = Field(
        60.0,
        ge=0,
        description="How long a citeflow process waits for the store file while another process holds it, "
        "before it gives up with an error. 0 gives up at once.",
    )
    sql_timeout_seconds: float = Field(
        60.0, gt=0, description="`citeflow sql` stops a query that runs longer than this (--timeout)."
    )
    sql_memory_limit: str = Field(
        "1GB",
        pattern=MEMORY_SIZE,
        description="DuckDB memory_limit of the read-only connection `citeflow sql` opens (--memory-limit); "
        "a query that needs more is stopped.",
    )
