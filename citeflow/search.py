"""Search: one small interface. Providers are in citeflow/web/providers.py and storage/search.py."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from citeflow.contracts import SearchResult


@runtime_checkable
class Searcher(Protocol):
    name: str

    def search(self, query: str, limit: int) -> list[SearchResult]:
        """At most `limit` results, best first, ranks starting at 1."""
        ...
