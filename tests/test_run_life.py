"""A run's life as a user's shell sees it: `citeflow run` in a subprocess, on a temporary Prefect server
(no server is running), every role on a scripted model server on 127.0.0.1.

Ctrl-C and SIGTERM end a run within seconds with one line, a `cancelled` row and the same state in
Prefect, and leave no process behind. A run killed with SIGKILL mid-verification leaves nothing behind
either, is marked `crashed` by the next run, and that run re-sends only the model requests that were in
flight: no page is fetched again and no finished verification is asked for again, even one whose claims
failed the checks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from openai_server import Received, Reply, json_reply
from role_server import PAGES, RoleServer, first_sentences, ingested, models_for
from web_servers import LoopbackServer, running_site, searxng_routes

from cli.server import temporary_server
from storage.store import close_stores, read_only_query

QUESTION = "Who founded Acme Corp and what does it make?"
CITEFLOW = str(Path(sys.executable).parent / "citeflow")
# What the loopback site's pages are about: a page not about its sub-question is never sent to a model.
WEB_QUESTION = "Why does water boil at a lower temperature at high altitude?"
WEB_PLAN = {
    "subquestions": [
        {"text": "At what temperature does water boil at altitude?", "query": "water boils altitude"},
        {"text": "Why is air pressure lower at high altitude?", "query": "altitude air pressure water"},
    ]
}
SLOW = 120.0  # a reply that never comes while the test runs


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the module's stores, so they share one Prefect database (.citeflow/prefect),
    migrated once: later temporary servers start in seconds, as a user's do."""
    return tmp_path_factory.mktemp("life")


@pytest.fixture
def server() -> Iterator[RoleServer]:
    with RoleServer() as running:
        yield running


def environment(server: RoleServer, **extra: str) -> dict[str, str]:
    """The shell of a user with a model endpoint and no Prefect server of their own."""
    env = {name: value for name, value in os.environ.items() if name != "PREFECT_API_URL"}
    return env | {"OPENAI_API_KEY": "sk-life-test", "CITEFLOW_WEB__PER_DOMAIN_DELAY": "0", **extra}


def start(
    db: Path, server: RoleServer, env: dict[str, str], *flags: str, question: str = QUESTION
) -> subprocess.Popen[str]:
    close_stores()  # the run's process must be able to open the store this one ingested into
    settings = [f"--set={name}={value}" for name, value in models_for(server).items()]
    return subprocess.Popen(
        [
            CITEFLOW,
            "run",
            question,
            "--db",
            str(db),
            "--reports",
            str(db.parent / "reports"),
            *settings,
            *flags,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition: Callable[[], bool], process: subprocess.Popen[str], timeout: float = 150.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"citeflow ended early ({process.returncode}): {process.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("the run never reached the point the test waits for")
        time.sleep(0.1)


def steady(count: Callable[[], int], seconds: float) -> Callable[[], bool]:
    """A condition true once `count` has not changed for `seconds`."""
    last, since = count(), time.monotonic()

    def held() -> bool:
        nonlocal last, since
        now = count()
        if now != last:
            last, since = now, time.monotonic()
        return time.monotonic() - since >= seconds

    return held


def status_of(db: Path) -> dict[str, str]:
    return dict(read_only_query(db, "SELECT run_id, status FROM runs")[1])


def prefect_state(db: Path, run_id: str) -> str:
    """The flow run's state as Prefect recorded it, read back from the store's Prefect database."""
    with temporary_server(db) as url:
        return httpx.get(f"{url}/flow_runs/{run_id}", timeout=30).json()["state"]["type"]


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_ends_the_run_within_seconds_with_one_line_and_a_final_status(
    folder: Path, server: RoleServer, signum: int, code: int
) -> None:
    db = ingested(folder, PAGES, signal.Signals(signum).name)
    server.handlers["planner"] = lambda received, n: Reply(content="{}", delay=SLOW)
    run = start(db, server, environment(server))
    wait_for(lambda: server.calls["planner"] > 0, run)  # the run is waiting on its first model call
    children = psutil.Process(run.pid).children(recursive=True)

    sent = time.monotonic()
    run.send_signal(signum)
    run.wait(timeout=30)
    seconds = time.monotonic() - sent

    stderr = run.stderr.read()
    assert run.returncode == code and seconds < 5, (seconds, stderr[-2000:])
    assert "Traceback" not in stderr
    [line] = [line for line in stderr.splitlines() if "cancelled" in line]
    assert line.startswith(f"cancelled ({signal.Signals(signum).name}): ")
    assert children and not psutil.wait_procs(children, timeout=5)[1]  # no process left behind
    [(run_id, status)] = status_of(db).items()
    assert status == "cancelled" and run_id in line
    assert prefect_state(db, run_id) == "CANCELLED"


def test_a_run_killed_mid_verification_is_resumed_and_marked_crashed(
    folder: Path, server: RoleServer
) -> None:
    db = folder / "killed.duckdb"  # web search only: the store starts empty

    def two_then_stall(received: Received, n: int) -> Reply:
        if n == 0:  # well-formed, but quoting what no page says: the page falls back, and is cached so
            invented = "Water boils at 40 degrees on every mountain, as all cooks agree."
            return json_reply({"claims": [{"text": invented, "quote": invented}]})
        reply = first_sentences(received, n)
        return reply if n < 2 else Reply(content=reply.content, delay=SLOW)

    server.handlers["verifier"] = two_then_stall
    server.handlers["planner"] = lambda received, n: json_reply(WEB_PLAN)
    with running_site() as web, LoopbackServer(searxng_routes(hits(web.site))) as searx:
        env = environment(
            server,
            SEARXNG_URL=searx.url(""),
            CITEFLOW_ALLOW_HOSTS=f"{web.site.host}:{web.site.port}",
            CITEFLOW_PROVIDER_ORDER="searxng",
            # Every verification in flight at once (a loopback endpoint gets one slot by default).
            CITEFLOW_MODELS__MAX_CONCURRENT_PER_ENDPOINT="16",
            # One research round, so the re-run's model requests are only those the killed run owed.
            CITEFLOW_CAPS__FOLLOWUPS_MAX="0",
        )
        first = start(db, server, env, "--search", "searxng", question=WEB_QUESTION)
        wait_for(lambda: server.calls["verifier"] >= 4, first)  # 2 answered, 2 stalled in flight
        # Every verification in flight, and the answered ones finished and cached: each call first takes
        # a slot of the endpoint's Prefect global concurrency limit, and Prefect acquires those one at a
        # time, so a slow acquisition can hold the last calls back for seconds after the fourth.
        wait_for(steady(lambda: server.calls["verifier"], seconds=5.0), first)
        children = psutil.Process(first.pid).children(recursive=True)
        fetched, calls = len(web.site.requests), dict(server.calls)
        first.kill()
        first.wait(timeout=30)
        left = psutil.wait_procs(children, timeout=15)[1]  # the temporary server ends with its run

        server.handlers["verifier"] = first_sentences
        second = start(db, server, env, "--search", "searxng", question=WEB_QUESTION)
        out, err = second.communicate(timeout=300)

    assert second.returncode == 0, err[-3000:]
    assert children and not left
    assert len(web.site.requests) == fetched  # no page fetched again
    assert server.calls["planner"] == calls["planner"]  # the plan was not asked for again
    # Only the verifications in flight were sent again (all but the two answered, one of which fell
    # back because its claims failed the checks).
    assert server.calls["verifier"] - calls["verifier"] == calls["verifier"] - 2
    statuses = sorted(status_of(db).values())
    assert statuses == ["complete", "crashed"] or statuses == ["crashed", "partial"]
    [killed] = [run_id for run_id, status in status_of(db).items() if status == "crashed"]
    assert prefect_state(db, killed) == "CRASHED"  # Prefect and the store agree


def hits(site: LoopbackServer) -> list[dict[str, str]]:
    paths = ["/articles/boiling.html", "/articles/altitude.html", "/articles/tea.html"]
    return [{"url": site.url(path), "title": path, "content": f"result for {path}"} for path in paths]


FLOW_IN_MAIN_THREAD = """
import sys
from flows.research import research_flow
research_flow(question=sys.argv[1], settings=dict(arg.split("=", 1) for arg in sys.argv[2:]))
"""


def test_sigterm_ends_a_worker_s_flow_run_process_within_seconds(folder: Path, server: RoleServer) -> None:
    # A worker runs each flow run in a process whose main thread runs the flow (`python -m prefect.engine`);
    # Prefect's own SIGTERM handling there waits for the task threads, here a model call that never ends.
    db = ingested(folder, PAGES, "worker")
    server.handlers["planner"] = lambda received, n: Reply(content="{}", delay=SLOW)
    settings = {"db": str(db), "reports": str(folder / "reports"), **models_for(server)}
    with temporary_server(db) as url:
        close_stores()
        run = subprocess.Popen(
            [sys.executable, "-c", FLOW_IN_MAIN_THREAD, QUESTION, *(f"{k}={v}" for k, v in settings.items())],
            env=environment(server, PREFECT_API_URL=url),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(lambda: server.calls["planner"] > 0, run)

        sent = time.monotonic()
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=60)
        seconds = time.monotonic() - sent
        [(run_id, status)] = status_of(db).items()
        state = httpx.get(f"{url}/flow_runs/{run_id}", timeout=30).json()["state"]

    assert run.returncode == 143 and seconds < 5, (seconds, run.stderr.read()[-2000:])
    assert status == "cancelled"
    assert (state["type"], state["message"]) == ("CANCELLED", "No report: the run was cancelled (SIGTERM).")


def test_a_worker_started_with_interrupts_ignored_stops_on_sigterm(folder: Path) -> None:
    # A script that starts a worker with `&` hands it SIGINT ignored, as a non-interactive shell does for
    # background jobs (here `trap "" INT`), and Prefect's worker stops on SIGTERM by interrupting itself:
    # `citeflow worker` restores the interrupt first (`prefect worker start` so started was still running
    # 150 s later).
    db = folder / "worker-signal.duckdb"
    with temporary_server(db) as url:
        env = {**os.environ, "PREFECT_API_URL": url, "PREFECT_HOME": str(folder / "worker-home")}
        pool = [str(Path(sys.executable).parent / "prefect"), "work-pool", "create", "citeflow", "--type",
                "process", "--overwrite"]  # fmt: skip
        subprocess.run(pool, env=env, check=True, capture_output=True)
        ignoring_interrupts = 'trap "" INT; exec "$0" worker --pool citeflow --name in-the-background'
        worker = subprocess.Popen(
            ["sh", "-c", ignoring_interrupts, CITEFLOW],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

        def online() -> bool:
            listed = httpx.post(f"{url}/work_pools/citeflow/workers/filter", json={}, timeout=30).json()
            return any(w["name"] == "in-the-background" and w["status"] == "ONLINE" for w in listed)

        wait_for(online, worker)
        sent = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        seconds = time.monotonic() - sent

    assert seconds < 10, f"the worker was still running {seconds:.0f} s after SIGTERM"
