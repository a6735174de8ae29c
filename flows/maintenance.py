"""Maintenance of a DuckLake store, as a flow citeflow ships for a schedule (docs/scale.md).

Every small commit to a lake writes its own Parquet file or inlined rows, and every commit is a
snapshot kept forever until expired: compaction merges the files and expires old snapshots, so reads
stay fast and the bucket does not grow without bound. Run it daily from one worker:

    prefect deploy flows/maintenance.py:compact_store_flow -n compact-store -p citeflow --cron "0 3 * * *"
"""

from __future__ import annotations

from prefect import flow, task

from citeflow.config import load_settings
from storage.store import get_store

KEEP_DAYS = 30  # `citeflow sql --at` reaches back this far


@task(name="compact-store")
def compact_store(db: str | None, keep_days: int) -> dict[str, int]:
    settings = load_settings({"db": db} if db else {}, None, flags_source="parameters").settings
    return get_store(settings.db, settings.store).compact(keep_days)


@flow(name="citeflow-compact-store")
def compact_store_flow(db: str | None = None, keep_days: int = KEEP_DAYS) -> dict[str, int]:
    """Merge a lake's small data files and expire snapshots older than `keep_days` (default 30)."""
    return compact_store(db, keep_days)
