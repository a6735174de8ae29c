"""Settings for web research: timeouts, caps, politeness, providers and the host allowlist.

Caps are enforced by the fetcher in code; these values only choose them. This is the `[web]` section of
the settings tree (citeflow/config.py), which also reads SEARXNG_URL, CITEFLOW_ALLOW_HOSTS,
CITEFLOW_PROVIDER_ORDER and the Tavily key (from the variable `tavily_key_env` names, never stored).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from citeflow.errors import InputError

USER_AGENT = "citeflow/0.1 (+https://github.com/citeflow/citeflow)"
PROVIDER_NAMES = ("duckduckgo", "wikipedia", "searxng", "tavily", "local")


def parse_allow_hosts(value: str) -> frozenset[tuple[str, int]]:
    """`host:port,host:port` -> exact (host, port) pairs; hosts lower-cased, IPv6 as `[::1]:8080`."""
    pairs: set[tuple[str, int]] = set()
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InputError(
                "CITEFLOW_ALLOW_HOSTS", f"{item!r} is not host:port", "no host was added to the allowlist"
            )
        pairs.add((host.strip("[]").lower(), int(port)))
    return frozenset(pairs)


def parse_provider_order(value: str) -> tuple[str, ...]:
    """`searxng,local` -> ('searxng', 'local'). Naming only the chosen provider leaves no fallback,
    which keeps a run off the public web (duckduckgo, wikipedia) on a machine that must not reach it."""
    return tuple(name.strip().lower() for name in value.split(",") if name.strip())


class WebSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    connect_timeout: float = Field(5.0, gt=0, description="Seconds to open a connection.")
    read_timeout: float = Field(10.0, gt=0, description="Seconds to wait for the next bytes of a response.")
    total_timeout: float = Field(
        30.0, gt=0, description="Seconds for a whole fetch, redirects included: ends pages that drip forever."
    )
    max_bytes: int = Field(5_000_000, ge=1024, description="A body larger than this is refused, mid-stream.")
    max_redirects: int = Field(5, ge=0, le=20, description="Redirect hops followed, each checked again.")
    per_domain_concurrency: int = Field(2, ge=1, description="Requests in flight to one host at once.")
    per_domain_delay: float = Field(
        1.0, ge=0, description="Seconds between the starts of requests to one host."
    )
    freshness_hours: float = Field(
        24.0, ge=0, description="A page stored this recently is read from the store, not fetched again."
    )
    breaker_threshold: int = Field(5, ge=1, description="Consecutive failures that open a circuit breaker.")
    breaker_cooldown: float = Field(
        60.0, gt=0, description="Seconds an open breaker skips its provider/host."
    )
    provider_order: tuple[str, ...] = Field(
        ("searxng", "duckduckgo", "wikipedia", "tavily", "local"),
        description="Fallback order after the chosen provider; unconfigured providers are left out.",
    )
    searxng_url: str | None = Field(None, description="Base URL of a SearXNG instance (SEARXNG_URL).")
    wikipedia_url: str = Field("https://en.wikipedia.org", description="Base URL of a MediaWiki site.")
    tavily_url: str = Field("https://api.tavily.com", description="Base URL of the Tavily API.")
    tavily_key_env: str = Field("TAVILY_API_KEY", description="Environment variable holding the Tavily key.")
    tavily_api_key: str | None = Field(
        None, repr=False, exclude=True, description="Read from `tavily_key_env`; never stored with a run."
    )
    allow_hosts: frozenset[tuple[str, int]] = Field(
        frozenset(), description="Exact host:port pairs admitted despite private addresses."
    )
    user_agent: str = Field(USER_AGENT, description="Sent with every request and matched against robots.txt.")

    @field_validator("provider_order", mode="before")
    @classmethod
    def _order_as_typed(cls, value: object) -> object:
        return parse_provider_order(value) if isinstance(value, str) else value

    @field_validator("allow_hosts", mode="before")
    @classmethod
    def _hosts_as_typed(cls, value: object) -> object:
        return parse_allow_hosts(value) if isinstance(value, str) else value

    @field_validator("provider_order")
    @classmethod
    def _known_providers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [name for name in value if name not in PROVIDER_NAMES]
        if unknown:
            raise ValueError(f"unknown search providers {unknown}; known: {', '.join(PROVIDER_NAMES)}")
        return value
