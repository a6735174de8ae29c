"""The network guard, the allowlist, settings from the environment, and the breaker's clock."""

from __future__ import annotations

import pytest

from citeflow.config import load_settings
from citeflow.errors import InputError
from citeflow.web.breaker import BreakerBoard
from citeflow.web.guard import FetchRefused, Guard
from citeflow.web.settings import WebSettings, parse_allow_hosts


def resolver_to(*addresses: str):
    calls: list[tuple[str, int]] = []

    def resolve(host: str, port: int) -> list[str]:
        calls.append((host, port))
        return list(addresses)

    resolve.calls = calls  # type: ignore[attr-defined]
    return resolve


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "ftp://example.org/x", "gopher://example.org/", "javascript:alert(1)", "data:,hi"],
)
def test_only_http_and_https_schemes_pass(url: str) -> None:
    resolve = resolver_to("93.184.216.34")
    with pytest.raises(FetchRefused, match="refused|no host"):
        Guard(resolver=resolve).check_url(url)
    assert resolve.calls == []  # refused before any name lookup


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.10", "private"),
        ("172.16.5.4", "private"),
        ("169.254.169.254", "link-local"),  # cloud metadata service
        ("fe80::1", "link-local"),
        ("224.0.0.251", "multicast"),
        ("240.0.0.1", "reserved"),
        ("0.0.0.0", "unspecified"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped IPv6 is unwrapped first
        ("100.64.0.1", "not globally routable"),  # carrier-grade NAT
    ],
)
def test_non_public_addresses_are_refused(address: str, kind: str) -> None:
    with pytest.raises(FetchRefused, match=kind):
        Guard(resolver=resolver_to(address)).check_url("http://innocent.example/page")


def test_one_bad_address_among_good_ones_is_enough_to_refuse() -> None:
    # DNS may answer with several addresses; the connection could use any of them.
    with pytest.raises(FetchRefused, match="private"):
        Guard(resolver=resolver_to("93.184.216.34", "10.0.0.1")).check_url("https://mixed.example/")


def test_public_address_passes_and_port_defaults_follow_the_scheme() -> None:
    resolve = resolver_to("93.184.216.34")
    target = Guard(resolver=resolve).check_url("https://Example.ORG/a?b=1")
    assert (target.url.host, target.address) == ("example.org", "93.184.216.34")
    assert resolve.calls == [("example.org", 443)]


def test_allowlist_admits_exact_host_and_port_only() -> None:
    guard = Guard(allow_hosts=frozenset({("127.0.0.1", 8080)}), resolver=resolver_to("127.0.0.1"))
    assert guard.check_url("http://127.0.0.1:8080/x").url.port == 8080
    with pytest.raises(FetchRefused, match="CITEFLOW_ALLOW_HOSTS"):
        guard.check_url("http://127.0.0.1:8081/x")
    with pytest.raises(FetchRefused, match="scheme"):
        guard.check_url("ftp://127.0.0.1:8080/x")  # the allowlist never widens the schemes


def test_real_resolution_of_localhost_is_refused() -> None:
    with pytest.raises(FetchRefused, match="loopback"):
        Guard().check_url("http://localhost:9/")


def test_allow_hosts_parsing_and_errors() -> None:
    assert parse_allow_hosts("127.0.0.1:8080, Intranet.Local:443,[::1]:9000,") == {
        ("127.0.0.1", 8080),
        ("intranet.local", 443),
        ("::1", 9000),
    }
    for bad in ("127.0.0.1", "host:port", "host:70000", ":80"):
        with pytest.raises(InputError, match="not host:port"):
            parse_allow_hosts(bad)


def test_settings_from_environment() -> None:
    env = {
        "SEARXNG_URL": "http://127.0.0.1:8888",
        "CITEFLOW_ALLOW_HOSTS": "127.0.0.1:8888",
        "CITEFLOW_WEB__TAVILY_KEY_ENV": "MY_TAVILY",
        "MY_TAVILY": "tvly-secret",
    }
    settings = load_settings({"web.per_domain_delay": 0}, None, env).settings.web
    assert settings.searxng_url == "http://127.0.0.1:8888"
    assert settings.allow_hosts == {("127.0.0.1", 8888)}
    assert settings.tavily_api_key == "tvly-secret"
    assert "tvly-secret" not in repr(settings)  # the key never shows in logs
    assert settings.per_domain_delay == 0
    assert settings.max_bytes == 5_000_000 and settings.max_redirects == 5
    assert "tvly-secret" not in load_settings(None, None, env).settings.stored_json()
    with pytest.raises(ValueError, match="extra"):
        WebSettings(unknown_field=1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="unknown search providers"):
        WebSettings(provider_order=("bing",))


def test_breaker_opens_after_threshold_and_half_opens_after_cooldown() -> None:
    now = [1000.0]
    board = BreakerBoard(threshold=5, cooldown=60, clock=lambda: now[0])
    assert [board.record_failure("p") for _ in range(5)] == [False, False, False, False, True]
    assert board.is_open("p") and board.seconds_left("p") == 60
    assert not board.is_open("other")
    now[0] += 59.9
    assert board.is_open("p")
    now[0] += 0.2
    assert not board.is_open("p")  # one trial is let through
    assert board.record_failure("p") is True  # and its failure re-opens at once
    assert board.is_open("p")
    now[0] += 61
    board.record_success("p")
    assert not board.is_open("p")
    assert board.record_failure("p") is False  # the count started again
