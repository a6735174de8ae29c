"""`prefect server start` on a free loopback port, for tests that need a server shared by processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from lake_servers import free_port

BIN = Path(sys.executable).parent


@contextmanager
def prefect_server(home: Path, database: str | None = None) -> Iterator[dict[str, str]]:
    """A real Prefect server whose own home is `home`; yields the environment that points processes at it.

    `database` is an SQLAlchemy URL for the server's own database; without it, SQLite in `home`.
    """
    port = free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_UI_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    }
    log_path = home / "server.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [BIN / "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env={**env, "PREFECT_API_DATABASE_CONNECTION_URL": database} if database else env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 150
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"prefect server did not start: {log_path.read_text()[-2000:]}")
                time.sleep(1)
            yield env
        finally:
            process.terminate()
            process.wait(timeout=30)
