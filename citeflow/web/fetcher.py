"""The fetcher: one guarded, capped, polite GET per page, and its extraction into a PageInput.

Redirects are followed here, not by httpx, so that every hop is guarded (citeflow.web.guard),
checked against robots.txt and the host's circuit breaker, and counted. Bodies are streamed and
refused the moment they pass the byte cap, and a whole fetch has a deadline, so a page that
drips bytes forever ends.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NoReturn

import httpx

from citeflow.contracts import Origin, PageInput
from citeflow.errors import FetchError
from citeflow.web.breaker import BreakerBoard
from citeflow.web.extract import extract
from citeflow.web.guard import FetchRefused, Guard, Target
from citeflow.web.robots import ROBOTS_MAX_BYTES, RobotsCache
from citeflow.web.settings import WebSettings

REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class Body:
    url: str  # after redirects
    status: int
    content_type: str
    content: bytes


class DomainLimiter:
    """At most `concurrency` requests in flight per host, and starts at least `delay` s apart."""

    def __init__(self, concurrency: int, delay: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.concurrency = concurrency
        self.delay = delay
        self._clock = clock
        self._lock = threading.Lock()
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._next_start: dict[str, float] = {}

    @contextmanager
    def slot(self, host: str) -> Iterator[None]:
        with self._lock:
            semaphore = self._slots.setdefault(host, threading.BoundedSemaphore(self.concurrency))
        with semaphore:
            with self._lock:  # reserve a start time, then wait for it outside the lock
                now = self._clock()
                start = max(now, self._next_start.get(host, now))
                self._next_start[host] = start + self.delay
            if start > now:
                time.sleep(start - now)
            yield


def _decoder(url: str, encoding: str) -> Callable[[bytes, int], bytes]:
    """Decompress one chunk producing at most `limit` bytes, so a zip bomb cannot fill memory."""
    if encoding in ("", "identity"):
        return lambda chunk, limit: chunk
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise FetchError(url, f"content encoding {encoding!r} is not supported")
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)  # 32: accept a gzip or zlib header

    def decode(chunk: bytes, limit: int) -> bytes:
        try:
            return inflater.decompress(chunk, limit)
        except zlib.error as error:
            raise FetchError(url, f"corrupt {encoding} body ({error})") from error

    return decode


class Fetcher:
    """Shared by the threads of a run; close it when the run ends."""

    def __init__(
        self,
        settings: WebSettings,
        breakers: BreakerBoard | None = None,
        guard: Guard | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.breakers = breakers or BreakerBoard(settings.breaker_threshold, settings.breaker_cooldown)
        self.guard = guard or Guard(settings.allow_hosts)
        self.limiter = DomainLimiter(settings.per_domain_concurrency, settings.per_domain_delay)
        self.robots = RobotsCache(self._get_robots, settings.user_agent)
        # trust_env=False: an environment proxy would connect on our behalf to hosts we never checked.
        self._client = httpx.Client(
            timeout=httpx.Timeout(settings.read_timeout, connect=settings.connect_timeout),
            headers={"User-Agent": settings.user_agent, "Accept-Encoding": "gzip, deflate"},
            follow_redirects=False,
            trust_env=False,
            transport=transport,
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Fetcher:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def fetch(self, url: str) -> PageInput:
        """The page at `url`, extracted. FetchRefused when policy forbids it (scheme, address,
        robots.txt, open breaker); FetchError when it failed or holds no usable text."""
        body = self.get(url, self.settings.max_bytes, obey_robots=True)
        if body.status != 200:
            raise FetchError(body.url, f"HTTP {body.status}")
        extracted = extract(body.url, body.content, body.content_type)
        return PageInput(
            url=body.url,
            title=extracted.title,
            text=extracted.text,
            origin=Origin.fetched,
            published=extracted.published,
        )

    def get(self, url: str, max_bytes: int, obey_robots: bool, truncate: bool = False) -> Body:
        """Follow up to `max_redirects` hops, each guarded before it is connected to. A body past
        `max_bytes` is refused, or with `truncate` cut to its first `max_bytes` bytes."""
        budget = self.settings.total_timeout
        current = url
        for hop in range(self.settings.max_redirects + 1):
            try:
                target = self.guard.check_url(current)
            except FetchRefused as refusal:
                if hop == 0:
                    raise
                raise FetchRefused(
                    url, f"redirect hop {hop} to {current}: {refusal.problem}", refusal.holds
                ) from None
            if obey_robots and not self.robots.allowed(str(target.url)):
                raise FetchRefused(current, f"robots.txt disallows it for {self.settings.user_agent}")
            host = target.url.host.lower()
            if self.breakers.is_open(host):
                raise FetchRefused(
                    current,
                    f"circuit breaker for {host} is open after {self.breakers.threshold} consecutive "
                    f"failures ({self.breakers.seconds_left(host):.0f} s left)",
                )
            with self.limiter.slot(host):
                started = time.monotonic()
                location, body = self._request(target, max_bytes, started + budget, truncate)
                budget -= time.monotonic() - started
            if location is None:
                assert body is not None
                return body
            current = location
        raise FetchError(url, f"more than {self.settings.max_redirects} redirects")

    def _request(
        self, target: Target, max_bytes: int, deadline: float, truncate: bool
    ) -> tuple[str | None, Body | None]:
        """One GET: (redirect location, None) or (None, body). Counts toward the host's breaker.

        It connects to the address the guard checked, naming the host in the Host header and in TLS
        (SNI and certificate), so the name is never resolved again between check and connection."""
        host = target.url.host.lower()
        url = str(target.url)
        pinned = target.url.copy_with(host=target.address)
        extensions = {"sni_hostname": target.url.host} if target.url.scheme == "https" else {}
        try:
            with self._client.stream(
                "GET", pinned, headers={"Host": target.url.netloc.decode("ascii")}, extensions=extensions
            ) as response:
                if response.status_code >= 500 or response.status_code == 429:
                    self._failed(host, url, f"HTTP {response.status_code}")
                self.breakers.record_success(host)
                location = response.headers.get("location")
                if response.status_code in REDIRECT_CODES and location:
                    return str(target.url.join(location)), None
                content = self._read(url, response, max_bytes, deadline, truncate)
                content_type = response.headers.get("content-type", "")
                return None, Body(url, response.status_code, content_type, content)
        except httpx.TimeoutException as error:
            self._failed(host, url, f"timed out ({type(error).__name__})")
        except (httpx.TransportError, httpx.InvalidURL) as error:
            self._failed(host, url, f"connection failed ({error!r})")

    def _failed(self, host: str, url: str, problem: str) -> NoReturn:
        opened = self.breakers.record_failure(host)
        note = f"; circuit breaker for {host} opened for {self.breakers.cooldown:.0f} s" if opened else ""
        raise FetchError(url, f"{problem}{note}")

    def _read(
        self, url: str, response: httpx.Response, max_bytes: int, deadline: float, truncate: bool
    ) -> bytes:
        declared = response.headers.get("content-length", "")
        if not truncate and declared.isdigit() and int(declared) > max_bytes:
            raise FetchError(url, f"declares {int(declared):,} bytes; the cap is {max_bytes:,}")
        decode = _decoder(url, response.headers.get("content-encoding", "").strip().lower())
        chunks: list[bytes] = []
        size = 0
        for raw in response.iter_raw():
            chunk = decode(raw, max_bytes - size + 1)
            size += len(chunk)
            if size > max_bytes and truncate:
                chunks.append(chunk[: len(chunk) - (size - max_bytes)])
                break  # the rest is never read
            if size > max_bytes:
                raise FetchError(url, f"body passed the {max_bytes:,}-byte cap; refused")
            if time.monotonic() > deadline:
                raise FetchError(url, f"not finished after {self.settings.total_timeout:.0f} s; abandoned")
            chunks.append(chunk)
        return b"".join(chunks)

    def _get_robots(self, url: str) -> tuple[int, bytes]:
        # RFC 9309 2.5: past the parsing limit a crawler reads no further, and the rules before it
        # hold; refusing the file would turn a large robots.txt into "disallow everything".
        body = self.get(url, ROBOTS_MAX_BYTES, obey_robots=False, truncate=True)
        content = body.content
        if len(content) == ROBOTS_MAX_BYTES:  # cut mid-line: half of `Disallow: /private/` is `/`
            content = content[: content.rfind(b"\n") + 1]
        return body.status, content
