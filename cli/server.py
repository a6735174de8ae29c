"""The local Prefect server that runs, schedules and the UI share, and the temporary one a run falls back to.

`citeflow server start` runs `prefect server start` (UI, scheduler, API) in the background on loopback,
with its SQLite database under the store's folder (.citeflow/prefect/prefect.db), and records it in
.citeflow/server.json so `citeflow run`, `status` and `stop` find it. A run with no server up starts a
temporary API server (no UI, no scheduler) on the same database, which is fast once that database exists,
and stops it when the run ends. The temporary server is the run's child and is told to end with it, so no
process citeflow starts outlives it, even after a SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
from pydantic import BaseModel

from citeflow.errors import InputError

STATE_FILE = "server.json"
DEFAULT_PORT = 4200
# A fresh database takes 13-35 s to migrate on 2 cores; a migrated one starts in about 4 s.
START_TIMEOUT_SECONDS = 150.0
STOP_TIMEOUT_SECONDS = 15.0
# Run as `python -c _DIE_WITH_PARENT uvicorn ...`: ask the kernel for SIGTERM when the parent dies (Linux
# prctl PR_SET_PDEATHSIG; elsewhere the run's own cleanup is all there is), then become the server. The
# check of the parent closes the window in which it died before the request was made.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "try:\n    ctypes.CDLL('libc.so.6').prctl(1, signal.SIGTERM)\n"
    "except (OSError, AttributeError):\n    pass\n"
    "if os.getppid() == 1:\n    sys.exit(0)\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


class ServerState(BaseModel):
    """What `citeflow server start` recorded about the server it started."""

    pid: int
    url: str  # the API, e.g. http://127.0.0.1:4200/api
    started_at: datetime
    log: str

    @property
    def ui(self) -> str:
        return self.url.removesuffix("/api")


def citeflow_dir(db: Path) -> Path:
    """Where citeflow keeps what belongs with a store: the Prefect database, the server's state."""
    return db.resolve().parent / ".citeflow"


def database_url(db: Path) -> str:
    return f"sqlite+aiosqlite:///{citeflow_dir(db) / 'prefect' / 'prefect.db'}"


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(db: Path, url: str) -> dict[str, str]:
    """The environment of a server on the store's database; the UI calls the API where it really is."""
    (citeflow_dir(db) / "prefect").mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        "PREFECT_SERVER_DATABASE_CONNECTION_URL": database_url(db),
        "PREFECT_UI_API_URL": url,
        "PREFECT_API_URL": url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    }


def wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not healthy(url, timeout=1.0):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            tail = log.read_text(errors="replace")[-600:] if log.exists() else ""
            raise InputError("the Prefect server", f"did not start; its log ends: {tail}", "nothing was run")
        time.sleep(0.2)


def running_server(db: Path) -> ServerState | None:
    """The server `citeflow server start` started for this store's folder, if it still answers."""
    path = citeflow_dir(db) / STATE_FILE
    if not path.exists():
        return None
    state = ServerState.model_validate_json(path.read_text())
    return state if healthy(state.url) else None


def start_server(db: Path, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> ServerState:
    """Start `prefect server start` in the background, in a session of its own (so it outlives this
    command, which is the point), and record it."""
    if (state := running_server(db)) is not None:
        return state
    url = f"http://{host}:{port}/api"
    if healthy(url):
        raise InputError(f"port {port}", "already serves another Prefect server", "nothing was started")
    folder = citeflow_dir(db)
    log = folder / "prefect" / "server.log"
    env = server_env(db, url)
    command = [sys.executable, "-m", "prefect", "server", "start", "--host", host, "--port", str(port)]
    with log.open("ab") as out:
        process = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    wait_healthy(url, process, log)
    state = ServerState(pid=process.pid, url=url, started_at=datetime.now(UTC), log=str(log))
    (folder / STATE_FILE).write_text(state.model_dump_json(indent=2))
    return state


def stop_server(db: Path) -> ServerState | None:
    """Stop the recorded server and everything in its session; the state it had, or None."""
    path = citeflow_dir(db) / STATE_FILE
    if not path.exists():
        return None
    state = ServerState.model_validate_json(path.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.killpg(state.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            os.killpg(state.pid, 0)  # raises ProcessLookupError once the whole group is gone
            time.sleep(0.2)
        os.killpg(state.pid, signal.SIGKILL)
    path.unlink()
    return state


TEMPORARY_PORT_ENV = "CITEFLOW_TEMPORARY_SERVER_PORT"


def temporary_port() -> int:
    """The port of a temporary server: $CITEFLOW_TEMPORARY_SERVER_PORT (a firewall may allow only one),
    else any free one."""
    chosen = os.environ.get(TEMPORARY_PORT_ENV, "").strip()
    if not chosen:
        return free_port()
    if not chosen.isdigit() or not 0 < int(chosen) < 65536:
        raise InputError(f"{TEMPORARY_PORT_ENV}={chosen}", "is not a port number (1-65535)", "nothing ran")
    return int(chosen)


@contextlib.contextmanager
def temporary_server(db: Path) -> Iterator[str]:
    """An API-only Prefect server for one run, on the store's Prefect database; its API URL.

    Started from the calling thread, which must outlive it (the parent-death signal follows the thread
    that started the child): `citeflow run` starts it from its main thread."""
    url = f"http://127.0.0.1:{temporary_port()}/api"
    log = citeflow_dir(db) / "prefect" / "temporary-server.log"
    env = server_env(db, url) | {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1"}
    port = url.split(":")[2].split("/")[0]
    command = [
        sys.executable, "-c", _DIE_WITH_PARENT, "-m", "uvicorn", "--factory",
        "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", port, "--log-level", "error",
    ]  # fmt: skip
    with log.open("ab") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(url, process, log)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
