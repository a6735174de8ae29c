"""Search: one small interface, and the registry that turns a provider name into a searcher."""

from __future__ import annotations

from typing import Protocol

from citeflow.contracts import SearchResult


class Searcher(Protocol):
    name: str

    def search(self, query: str, limit: int) -> list[SearchResult]:
        """At most `limit` results, best first, ranks starting at 1."""
        ...
