"""Model calls bounded across every process and worker: one Prefect global concurrency limit per endpoint.

The client's own semaphore bounds the calls of one process; three workers each holding 16 would send 48 to
a server sized for 16. `endpoint_slot` fills the client's `SharedSlots` with a Prefect global concurrency
limit named after the endpoint (`limit_name`: its public URL, never its credentials) and sized from the
settings' per-endpoint concurrency. citeflow creates the limit the first time a process calls the endpoint;
one a team created or resized itself is left as it is. Each process checks once per limit name.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectAlreadyExists

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_created: set[str] = set()  # the limits this process has made sure exist


def ensure_limit(name: str, slots: int) -> None:
    """Create the global concurrency limit `name` with `slots` slots unless it exists."""
    with _lock:
        if name in _created:
            return
        with get_client(sync_client=True) as client:
            try:
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=slots))
                logger.info("created the global concurrency limit %s (%d slots)", name, slots)
            except ObjectAlreadyExists:
                pass
        _created.add(name)


@contextmanager
def endpoint_slot(name: str, slots: int) -> Iterator[None]:
    """A slot of the limit `name`, shared by every process on this Prefect server, held while the call runs.
    A server that cannot be reached to create the limit leaves the call bounded by this process only."""
    try:
        ensure_limit(name, slots)
    except httpx.HTTPError as exc:
        logger.warning(
            "the Prefect API did not create the limit %s (%s): calls bounded per process",
            name,
            exc,
        )
        yield
        return
    with concurrency(name, occupy=1, strict=False):
        yield
