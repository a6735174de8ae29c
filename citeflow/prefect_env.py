"""Prefect defaults for a machine that may be offline, set before Prefect reads its settings."""

from __future__ import annotations

import os

DEFAULTS = {
    # A fresh temporary server took 16-33 s to start on a 2-core machine; Prefect's default is 20 s.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    # No telemetry: it fails offline and fills the log with errors.
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
}


def apply_prefect_defaults() -> None:
    """Set each default unless the user already chose a value."""
    for name, value in DEFAULTS.items():
        os.environ.setdefault(name, value)
