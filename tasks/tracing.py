"""One trace row per step: which stage, which sub-question, which tool or role, when, and how it ended."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from citeflow.contracts import Outcome, Trace
from storage.store import EvidenceStore


@dataclass
class Step:
    """What a traced step reports about itself before it ends."""

    outcome: Outcome = Outcome.ok
    detail: str = ""
    actor: str | None = None  # set when the actor is known only once the step has run


@contextmanager
def traced(
    store: EvidenceStore, run_id: str, stage: str, actor: str, subquestion_id: str | None = None
) -> Iterator[Step]:
    """Record the step as a trace row whether it succeeds or raises (then as failed, and re-raise)."""
    step = Step()
    started = datetime.now(UTC)
    try:
        yield step
    except BaseException as error:
        step.outcome, step.detail = Outcome.failed, f"{type(error).__name__}: {error}"
        raise
    finally:
        store.add_trace(
            Trace(
                run_id=run_id,
                stage=stage,
                subquestion_id=subquestion_id,
                actor=step.actor or actor,
                started_at=started,
                ended_at=datetime.now(UTC),
                outcome=step.outcome,
                detail=step.detail,
            )
        )
