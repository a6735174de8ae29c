"""Which engine plays the roles of a run."""

from __future__ import annotations

from citeflow.config import Settings
from citeflow.extractive import extractive_engine
from citeflow.roles import Engine


def build_engine(settings: Settings) -> Engine:
    """The extractive engine plays every role: no model endpoint is configured."""
    return extractive_engine()
