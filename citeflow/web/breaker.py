"""Circuit breakers: after N consecutive failures, skip a search provider or a host for a while.

A dead provider or host would otherwise cost a full timeout for every sub-question. One board
holds a breaker per key ("searxng", "example.org"); it is shared by the threads of one run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _State:
    failures: int = 0
    opened_at: float | None = None


class BreakerBoard:
    def __init__(
        self, threshold: int = 5, cooldown: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self._clock = clock
        self._states: dict[str, _State] = {}
        self._lock = threading.Lock()

    def is_open(self, key: str) -> bool:
        """True while `key` is being skipped. After the cooldown one more try is let through;
        its failure opens the breaker again at once, its success closes it."""
        with self._lock:
            state = self._states.get(key)
            if state is None or state.opened_at is None:
                return False
            return self._clock() - state.opened_at < self.cooldown

    def seconds_left(self, key: str) -> float:
        with self._lock:
            state = self._states.get(key)
            if state is None or state.opened_at is None:
                return 0.0
            return max(0.0, self.cooldown - (self._clock() - state.opened_at))

    def record_success(self, key: str) -> None:
        with self._lock:
            self._states[key] = _State()

    def record_failure(self, key: str) -> bool:
        """Count a failure; True when this failure opened (or re-opened) the breaker."""
        with self._lock:
            state = self._states.setdefault(key, _State())
            state.failures += 1
            if state.failures < self.threshold:
                return False
            state.opened_at = self._clock()
            return True
