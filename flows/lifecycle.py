"""One owner of each run's life: every way a run ends leaves its row with a final status.

  the finish stage ran                      complete, partial or failed, as the report says
  an error stopped the run (any Exception)  failed, with the error in the run's errors
  Ctrl-C, SIGTERM, a cancel from Prefect    cancelled
  the process died (SIGKILL, power loss)    crashed, marked by the next run that opens the store

Prefect shows the same: the flow returns or raises accordingly, and a run marked `crashed` here is set
Crashed in Prefect too when its API can be reached.
"""

from __future__ import annotations

import contextvars
import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prefect.client.orchestration import get_client
from prefect.states import Cancelled, Crashed, State

from citeflow.config import Settings
from citeflow.contracts import RunError, RunStatus
from citeflow.process import is_alive, this_process
from storage.store import EvidenceStore, get_store

logger = logging.getLogger(__name__)


def mark_crashed(store: EvidenceStore) -> list[str]:
    """Mark `crashed` every run left `running` by a process that is gone; their ids. A row written
    before runs recorded their process has no owner, and its process is gone: the store could not have
    been opened by this citeflow while it ran."""
    crashed = []
    for run_id, owner in store.running_runs().items():
        if owner is not None and is_alive(owner):
            continue
        who = f"pid {owner.pid} on {owner.host}" if owner else "an earlier citeflow"
        if store.end_run(run_id, RunStatus.crashed, f"No report: the process running this run ({who}) died."):
            crashed.append(run_id)
    return crashed


def tell_prefect(run_ids: list[str], state: State) -> None:
    """Set each run's Prefect flow run to `state`, as its row is. Best effort: the runs may have used
    another Prefect server, or none that is still up; the store's status stands either way."""
    if not run_ids:
        return
    try:
        with get_client(sync_client=True) as client:
            for run_id in run_ids:
                client.set_flow_run_state(run_id, state.model_copy(), force=True)
    except Exception as error:  # noqa: BLE001 - Prefect's answer changes nothing here
        logger.warning("could not set %d run(s) %s in Prefect: %s", len(run_ids), state.name, error)


RECENT_RUNS = 200  # rows checked against Prefect's states when a run starts


def crashed_in_prefect_too(store: EvidenceStore) -> list[str]:
    """Set Crashed in Prefect every recent run the store says crashed but Prefect still shows as not
    finished; their ids. The row may have been marked by a citeflow with no Prefect server at hand
    (`citeflow runs`), so each run checks rather than relying on who marked it. Best effort, as
    tell_prefect."""
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    crashed = [run.run_id for run in store.recent_runs(RECENT_RUNS) if run.status is RunStatus.crashed]
    if not crashed:
        return []
    unfinished = [StateType.RUNNING, StateType.PENDING, StateType.SCHEDULED, StateType.CANCELLING]
    try:
        with get_client(sync_client=True) as client:
            found = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(
                    id=FlowRunFilterId(any_=crashed),  # type: ignore[arg-type]
                    state=FlowRunFilterState(type=FlowRunFilterStateType(any_=unfinished)),
                )
            )
    except Exception as error:  # noqa: BLE001 - Prefect's answer changes nothing here
        logger.warning("could not read %d crashed run(s) from Prefect: %s", len(crashed), error)
        return []
    ids = [str(run.id) for run in found]
    tell_prefect(ids, Crashed(message="The process running this flow run died."))
    return ids


def cancel_runs_of_this_process(db: Path, why: str) -> list[str]:
    """Mark `cancelled` the runs this process is running, in the store and in Prefect; their ids."""
    store = get_store(db)
    me = this_process()
    mine = [run_id for run_id, owner in store.running_runs().items() if owner == me]
    cancelled = [run_id for run_id in mine if store.end_run(run_id, RunStatus.cancelled, why)]
    tell_prefect(cancelled, Cancelled(message=why))
    return cancelled


@contextmanager
def cancelled_on_sigterm(db: Path) -> Iterator[None]:
    """While the block runs, SIGTERM ends this process's run within seconds: marked cancelled in the store
    and in Prefect, then the process exits 143, without waiting for in-flight model calls or fetches.

    This is for a process whose main thread runs the flow: a worker's flow-run process (`python -m
    prefect.engine`). Prefect's own handling there waits for the task threads (measured: still Running in
    Prefect 20 s after SIGTERM, with a model call in flight). `citeflow run` runs the flow in a thread and
    supervises signals itself (cli/common.py), so off the main thread this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    context = contextvars.copy_context()  # Prefect's settings (the API URL) live in context variables

    def cancel_and_exit() -> None:
        cancel_runs_of_this_process(db, "No report: the run was cancelled (SIGTERM).")
        os._exit(128 + signal.SIGTERM)

    def on_sigterm(signum: int, frame: object) -> None:
        # In a thread: the main thread, interrupted here, may hold the store, which the cancel needs.
        threading.Thread(target=context.run, args=(cancel_and_exit,), name="citeflow-cancel").start()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def owned_run(
    store: EvidenceStore,
    run_id: str,
    question: str,
    settings: Settings,
    engine: str,
    topic: str | None = None,
) -> Iterator[None]:
    """Record the run as running, and give it a final status however the block ends. The finish stage
    sets the status of a run that reaches it; a row already final is never overwritten."""
    mark_crashed(store)
    crashed_in_prefect_too(store)
    store.start_run(
        run_id,
        question,
        engine,
        settings.search,
        settings.stored_json(),
        settings.digest(),
        this_process(),
        topic,
    )
    try:
        yield
    except Exception as error:
        detail = f"{type(error).__name__}: {error}"
        store.add_error(RunError(run_id=run_id, stage="run", detail=detail))
        store.end_run(run_id, RunStatus.failed, f"No report: {detail}")
        raise
    except BaseException as interrupt:  # KeyboardInterrupt, SystemExit, Prefect's TerminationSignal
        store.end_run(
            run_id, RunStatus.cancelled, f"No report: the run was cancelled ({type(interrupt).__name__})."
        )
        raise
