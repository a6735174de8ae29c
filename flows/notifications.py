"""Telling people about a recurring topic's run: a Prefect notification block, named by the topic, is sent
a short message when a run finds changes or fails."""

from __future__ import annotations

import logging

from prefect.blocks.core import Block
from prefect.runtime import flow_run

logger = logging.getLogger(__name__)

FIRST_LINES = 8  # of the report: its title, status line and opening sentences


def message(topic: str, outcome: str, markdown: str) -> tuple[str, str]:
    """(subject, body): what happened, the report's first lines and where to read the rest."""
    lines = [line for line in markdown.splitlines() if line.strip()][:FIRST_LINES]
    link = flow_run.ui_url or f"flow run {flow_run.id}"
    return f"citeflow topic {topic}: {outcome}", "\n".join([*lines, "", f"Open the run: {link}"])


def notify(block: str, topic: str, outcome: str, markdown: str) -> None:
    """Send the message through the block `block` (TYPE/NAME). A notification that cannot be sent is
    logged, never fatal: the run's report and status stand whatever the channel does."""
    subject, body = message(topic, outcome, markdown)
    try:
        Block.load(block).notify(body=body, subject=subject)
    except Exception as error:  # noqa: BLE001 - any failure of a third-party channel is only logged
        logger.warning("could not notify %s about topic %s: %s", block, topic, error)
