"""The fetcher against real servers on 127.0.0.1: pages, caps, redirects, robots.txt, hostile bodies."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from web_servers import HUGE_BYTES, LoopbackServer, Reply, Request, Site, outbound, running_site, settings_for

from citeflow.contracts import Origin
from citeflow.errors import FetchError
from citeflow.web.fetcher import Fetcher
from citeflow.web.guard import FetchRefused, Guard
from citeflow.web.robots import ROBOTS_MAX_BYTES
from citeflow.web.settings import USER_AGENT


@pytest.fixture(scope="module")
def web() -> Iterator[Site]:
    with running_site() as site:
        yield site


@pytest.fixture
def fetcher(web: Site) -> Iterator[Fetcher]:
    with Fetcher(settings_for(web.site)) as fetcher:
        yield fetcher


def test_html_page_keeps_title_date_and_main_text_without_boilerplate(web: Site, fetcher: Fetcher) -> None:
    page = fetcher.fetch(web.site.url("/articles/boiling.html"))
    assert page.origin is Origin.fetched
    assert page.title == "Why water boils at different temperatures"
    assert page.published == "2024-03-05"
    assert (
        "in Denver, about 1,600 metres above sea level, water boils at roughly 95 degrees Celsius"
        in page.text
    )
    assert "All rights reserved" not in page.text and "About" not in page.text  # footer and nav dropped


def test_plain_text_and_pdf(web: Site, fetcher: Fetcher) -> None:
    notes = fetcher.fetch(web.site.url("/notes.txt"))
    assert notes.title == "Field notes on boiling"
    assert "Water at sea level boils at 100 degrees Celsius." in notes.text
    paper = fetcher.fetch(web.site.url("/paper.pdf"))
    assert paper.title == "Boiling points"
    assert paper.published == "2023-04-15"
    assert "Water boils at 100 C at sea level." in paper.text


def test_redirect_chain_is_followed_and_final_url_kept(web: Site, fetcher: Fetcher) -> None:
    page = fetcher.fetch(web.site.url("/redirect/one"))
    assert page.url == web.site.url("/articles/boiling.html")
    assert "Pressure cookers" in page.text


def test_redirect_loop_stops_at_the_hop_cap(web: Site) -> None:
    before = web.site.paths().count("/redirect/loop")
    with (
        Fetcher(settings_for(web.site, max_redirects=3)) as fetcher,
        pytest.raises(FetchError, match="more than 3"),
    ):
        fetcher.fetch(web.site.url("/redirect/loop"))
    assert web.site.paths().count("/redirect/loop") - before == 4  # first request + 3 hops


def test_redirect_to_loopback_port_not_allowlisted_is_never_connected(web: Site, fetcher: Fetcher) -> None:
    with pytest.raises(FetchRefused, match=r"redirect hop 1 .*loopback address 127\.0\.0\.1"):
        fetcher.fetch(web.site.url("/redirect/inward"))
    assert web.forbidden.connections == 0


def test_unlisted_loopback_is_refused_before_connecting(web: Site, fetcher: Fetcher) -> None:
    with pytest.raises(FetchRefused, match="CITEFLOW_ALLOW_HOSTS"):
        fetcher.fetch(web.forbidden.url("/direct"))
    assert web.forbidden.connections == 0


def test_page_that_never_finishes_is_abandoned_at_the_deadline(web: Site, fetcher: Fetcher) -> None:
    started = time.monotonic()
    with pytest.raises(FetchError, match="not finished after 2 s"):
        fetcher.fetch(web.site.url("/slow/drip"))
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("path", ["/huge/declared", "/huge/streamed"])
def test_fifty_megabyte_page_is_refused_without_reading_it(web: Site, fetcher: Fetcher, path: str) -> None:
    sent_before = web.site.sent
    with pytest.raises(FetchError, match="5,000,000"):
        fetcher.fetch(web.site.url(path))
    time.sleep(0.2)  # let the server notice the closed connection
    # The server wrote at most the cap plus what socket buffers absorbed, far from 50 MB.
    assert web.site.sent - sent_before < HUGE_BYTES / 4


def test_gzip_bomb_is_refused_at_the_cap_after_decompression() -> None:
    bomb = gzip.compress(b"<p>" + b"a" * 40_000_000 + b"</p>")
    assert len(bomb) < 100_000
    headers = {"Content-Type": "text/html", "Content-Encoding": "gzip"}
    routes = {"/bomb": lambda _: Reply(headers=headers, body=bomb)}
    with LoopbackServer(routes) as server, Fetcher(settings_for(server)) as fetcher:
        with pytest.raises(FetchError, match="passed the 5,000,000-byte cap"):
            fetcher.fetch(server.url("/bomb"))
        assert server.requests[-1].headers["accept-encoding"] == "gzip, deflate"


def test_gzip_page_is_decoded() -> None:
    page = b"<html><head><title>Zipped</title></head><body><article><p>" + b"Compressed words. " * 30
    headers = {"Content-Type": "text/html", "Content-Encoding": "gzip"}
    body = gzip.compress(page + b"</p></article></body></html>")
    routes = {"/z": lambda _: Reply(headers=headers, body=body)}
    with LoopbackServer(routes) as server, Fetcher(settings_for(server)) as fetcher:
        assert "Compressed words." in fetcher.fetch(server.url("/z")).text


def test_binary_served_as_html_is_not_text(web: Site, fetcher: Fetcher) -> None:
    with pytest.raises(FetchError, match="not text"):
        fetcher.fetch(web.site.url("/binary.html"))


def test_robots_txt_disallow_is_honoured_and_fetched_once(web: Site) -> None:
    before = web.site.paths()
    with Fetcher(settings_for(web.site)) as fetcher:
        with pytest.raises(FetchRefused, match="robots.txt disallows"):
            fetcher.fetch(web.site.url("/private/secret.html"))
        fetcher.fetch(web.site.url("/articles/tea.html"))
    new = web.site.paths()[len(before) :]
    assert "/private/secret.html" not in new
    assert new.count("/robots.txt") == 1
    robots_request = next(r for r in web.site.requests if r.path == "/robots.txt")
    assert robots_request.headers["user-agent"] == USER_AGENT


def test_robots_unreachable_disallows_and_missing_allows() -> None:
    page = b"<html><body><article><p>" + b"Plenty of words here. " * 20 + b"</p></article></body></html>"
    routes = {"/a.html": lambda _: Reply(body=page)}
    with LoopbackServer(routes) as missing, Fetcher(settings_for(missing)) as fetcher:
        assert "Plenty of words" in fetcher.fetch(missing.url("/a.html")).text  # 404 robots: allowed
    routes["/robots.txt"] = lambda _: Reply(503, body=b"down")
    with LoopbackServer(routes) as down:
        with Fetcher(settings_for(down)) as fetcher, pytest.raises(FetchRefused, match="robots.txt"):
            fetcher.fetch(down.url("/a.html"))
        assert "/a.html" not in down.paths()


@pytest.mark.parametrize("declare_length", [True, False])
def test_robots_txt_past_the_parsing_limit_is_read_up_to_it_not_refused(declare_length: bool) -> None:
    page = b"<html><body><article><p>" + b"Plenty of words here. " * 20 + b"</p></article></body></html>"
    padding = b"# " + b"x" * 1022 + b"\n"
    large = [b"User-agent: *\nDisallow: /private/\n", *[padding] * (HUGE_BYTES // len(padding))]
    # The limit falls inside the last rule: `Disallow: /` is all that fits of `Disallow: /private/`.
    head = b"User-agent: *\n#"
    fill = b"x" * (ROBOTS_MAX_BYTES - len(head) - len(b"\nDisallow: /"))
    cut = [head + fill + b"\nDisallow: /private/\n"]

    def robots(chunks: list[bytes]) -> Callable[[Request], Reply]:
        headers = {"Content-Type": "text/plain"}
        if declare_length:
            headers["Content-Length"] = str(sum(map(len, chunks)))
        return lambda _: Reply(headers=headers, body=iter(chunks))

    routes = {"/a.html": lambda _: Reply(body=page), "/private/b.html": lambda _: Reply(body=page)}
    with LoopbackServer({**routes, "/robots.txt": robots(large)}) as site, Fetcher(settings_for(site)) as f:
        assert "Plenty of words" in f.fetch(site.url("/a.html")).text
        with pytest.raises(FetchRefused, match="robots.txt disallows"):
            f.fetch(site.url("/private/b.html"))  # the rules before the limit still hold
        assert site.sent < HUGE_BYTES / 4  # the fetcher stopped reading at the limit
    with LoopbackServer({**routes, "/robots.txt": robots(cut)}) as site, Fetcher(settings_for(site)) as f:
        assert "Plenty of words" in f.fetch(site.url("/a.html")).text


def test_injection_page_is_kept_as_data_and_its_url_not_followed(web: Site, fetcher: Fetcher) -> None:
    page = fetcher.fetch(web.site.url("/articles/injection.html"))
    assert "ignore all previous instructions" in page.text  # stored verbatim, as untrusted text
    assert "1,270 millimetres of rain" in page.text
    assert web.canary.connections == 0


def test_domain_breaker_opens_after_five_failures_and_stops_connecting(web: Site, fetcher: Fetcher) -> None:
    before = web.site.paths().count("/broken")
    for attempt in range(5):
        with pytest.raises(FetchError, match="HTTP 500") as caught:
            fetcher.fetch(web.site.url("/broken"))
        assert ("circuit breaker" in str(caught.value)) is (attempt == 4)
    with pytest.raises(FetchRefused, match="circuit breaker for 127.0.0.1 is open"):
        fetcher.fetch(web.site.url("/articles/tea.html"))
    assert web.site.paths().count("/broken") - before == 5


def test_per_domain_concurrency_and_delay() -> None:
    state = {"now": 0, "peak": 0}
    starts: list[float] = []
    lock = threading.Lock()

    def slow(_: Request) -> Reply:
        with lock:
            starts.append(time.monotonic())
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.3)
        with lock:
            state["now"] -= 1
        return Reply(
            body=b"<html><body><article><p>"
            + b"Slow but steady text. " * 20
            + b"</p></article></body></html>"
        )

    routes = {f"/p{i}": slow for i in range(6)}
    with LoopbackServer(routes) as server:
        with Fetcher(settings_for(server, per_domain_concurrency=2)) as fetcher:
            threads = [threading.Thread(target=fetcher.fetch, args=(server.url(f"/p{i}"),)) for i in range(6)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        assert state["peak"] == 2
        starts.clear()
        with Fetcher(settings_for(server, per_domain_delay=0.25)) as fetcher:
            for i in range(3):
                fetcher.fetch(server.url(f"/p{i}"))
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert len(gaps) == 2 and all(gap >= 0.24 for gap in gaps)


def test_unsupported_content_type_and_http_errors(web: Site, fetcher: Fetcher) -> None:
    with pytest.raises(FetchError, match="HTTP 404"):
        fetcher.fetch(web.site.url("/missing.html"))
    with (
        LoopbackServer(
            {"/img": lambda _: Reply(headers={"Content-Type": "image/png"}, body=b"\x89PNG")}
        ) as s,
        Fetcher(settings_for(s)) as other,
        pytest.raises(FetchError, match="image/png"),
    ):
        other.fetch(s.url("/img"))


def test_the_fetcher_connects_to_the_address_the_guard_checked(web: Site) -> None:
    # "rebind.test" resolves only through the guard's resolver; were it resolved again when
    # connecting (where DNS rebinding would strike), the lookup would leave loopback and be refused.
    port = web.site.host_port[1]
    resolved: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        resolved.append(host)
        return ["127.0.0.1"]

    settings = settings_for(allow_hosts=frozenset({("rebind.test", port)}))
    with outbound() as attempts, Fetcher(settings, guard=Guard(settings.allow_hosts, resolver)) as fetcher:
        page = fetcher.fetch(f"http://rebind.test:{port}/articles/boiling.html")

    assert page.url == f"http://rebind.test:{port}/articles/boiling.html"
    assert "water boils" in page.text
    assert attempts == []
    assert resolved.count("rebind.test") == 2  # robots.txt, then the page: each checked, each pinned
    assert {request.headers.get("host") for request in web.site.requests} >= {f"rebind.test:{port}"}
