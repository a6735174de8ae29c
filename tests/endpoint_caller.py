"""One process calling a model endpoint CALLS times at once, as a worker's run does: through a pool whose
slots are bounded by this process (SLOTS) and, unless --local, by the Prefect global concurrency limit the
tasks layer fills them with (tasks/endpoint_limits.py).

    python endpoint_caller.py URL SLOTS CALLS READY GO [--local]

It writes the file READY once imported and waits for the file GO, so that processes call at the same time.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from citeflow.llm.budget import Budget, MemoryCallLog
from citeflow.llm.client import EndpointPool, RoleClient
from citeflow.llm.settings import Limits, RoleConfig, RoleName
from tasks.endpoint_limits import endpoint_slot


def main() -> None:
    url, slots, calls, ready, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    pool = EndpointPool(
        Limits(max_concurrent_per_endpoint=slots), {}, None if "--local" in sys.argv else endpoint_slot
    )
    log = MemoryCallLog()
    config = RoleConfig(model="scripted-model", base_url=url, max_attempts=1)
    client = RoleClient(RoleName.planner, config, pool, Budget(log, "caller", 10**7), log, "caller")
    Path(ready).touch()
    while not Path(go).exists():
        time.sleep(0.05)
    errors: list[BaseException] = []

    def call(n: int) -> None:
        try:
            client.complete([{"role": "user", "content": f"call {n}"}])
        except BaseException as exc:  # reported through the exit status
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(n,)) for n in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        sys.exit(f"{len(errors)} call(s) failed, the first with {errors[0]!r}")


if __name__ == "__main__":
    main()
