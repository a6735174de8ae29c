"""Which process runs a run, and whether it is still alive: how a run left `running` by a process that
died (SIGKILL, power loss) is told from one still going."""

from __future__ import annotations

import os
import socket

import psutil

from citeflow.contracts import ProcessId


def this_process() -> ProcessId:
    return ProcessId(pid=os.getpid(), host=socket.gethostname(), started=psutil.Process().create_time())


def is_alive(process: ProcessId) -> bool:
    """Whether `process` still runs. Only a process on this host can be checked; one elsewhere counts as
    alive. A pid now used by a newer process (another start time) counts as dead."""
    if process.host != socket.gethostname():
        return True
    try:
        return abs(psutil.Process(process.pid).create_time() - process.started) < 1.0
    except psutil.NoSuchProcess:
        return False
