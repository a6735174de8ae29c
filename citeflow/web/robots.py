"""robots.txt, honoured per RFC 9309 and cached per origin for the life of a run.

A missing file (4xx) allows everything; an unreachable one (5xx, network failure) disallows
everything, since the site may be saying "not now". The file is fetched through the same guarded,
capped fetcher as pages.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
from protego import Protego

from citeflow.errors import FetchError

ROBOTS_MAX_BYTES = 512_000  # RFC 9309 asks crawlers to parse at least 500 KiB; the fetcher reads no more

# (status code, body) of GET /robots.txt; raises FetchError when it cannot be fetched at all.
RobotsGetter = Callable[[str], tuple[int, bytes]]


class RobotsCache:
    def __init__(self, get: RobotsGetter, user_agent: str) -> None:
        self._get = get
        self._user_agent = user_agent
        self._rules: dict[str, Protego | bool] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def allowed(self, url: str) -> bool:
        origin = robots_url(url)
        with self._lock:
            origin_lock = self._locks.setdefault(origin, threading.Lock())
        with origin_lock:  # one fetch of robots.txt per origin, even with many threads asking
            if origin not in self._rules:
                self._rules[origin] = self._load(origin)
        rules = self._rules[origin]
        if isinstance(rules, bool):
            return rules
        return bool(rules.can_fetch(url, self._user_agent))

    def _load(self, origin: str) -> Protego | bool:
        try:
            status, body = self._get(origin)
        except FetchError:
            return False
        if 400 <= status < 500:
            return True
        if status != 200:
            return False
        return Protego.parse(body.decode("utf-8", errors="replace"))


def robots_url(url: str) -> str:
    """The robots.txt that governs `url`: same scheme, host and port."""
    return str(httpx.URL(url).copy_with(path="/robots.txt", query=None, fragment=None))
