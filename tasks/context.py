"""What a run's tasks share and cannot take as arguments: the store, the web session, the model engine.

Prefect hashes task arguments for caching and shows them in the UI, and clients do not hash, so they are
not arguments. The flow opens a RunContext for the run (`open_run_context`) and every task reads it with
`current_run()`; Prefect's thread pool copies context variables into each task's thread, so a task sees
the context of the run that submitted it, and two runs in one process never see each other's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from citeflow.config import Settings
from citeflow.extractive import extractive_engine
from citeflow.llm.client import EndpointPool
from citeflow.llm.roles import ModelEngine, build_engine
from citeflow.roles import Engine
from citeflow.web.research import WebResearch, open_research
from storage.search import LocalSearch
from storage.store import EvidenceStore
from tasks.caching import Fallbacks
from tasks.endpoint_limits import endpoint_slot


@dataclass(frozen=True)
class RunContext:
    run_id: str
    question: str
    settings: Settings
    store: EvidenceStore
    web: WebResearch
    models: ModelEngine
    topic: str | None  # the recurring topic this run researches, if any
    fallbacks: Fallbacks = field(default_factory=Fallbacks)  # of the stages' results, as they arrive

    @property
    def engine(self) -> Engine:
        return self.models.engine


_current: ContextVar[RunContext] = ContextVar("citeflow_run")


def current_run() -> RunContext:
    """The context of the run this task belongs to."""
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError("a citeflow task ran outside a research flow's run context") from None


@contextmanager
def open_run_context(
    run_id: str, question: str, settings: Settings, store: EvidenceStore, topic: str | None = None
) -> Iterator[RunContext]:
    """Build the run's clients from its settings, make them current, and close them when the run ends."""
    caps = settings.caps
    model_settings = settings.model_settings()
    models = build_engine(
        model_settings,
        store,
        run_id,
        caps=caps,
        fallback=extractive_engine(caps.subquestions_min, caps.report_findings_max, caps.report_words_max),
        # Calls to one endpoint are bounded across every process on the Prefect server, not only this one.
        pool=EndpointPool(model_settings.limits, shared=endpoint_slot),
    )
    web = open_research(run_id, settings.search, settings.web, store.latest_page, LocalSearch(store))
    context = RunContext(run_id, question, settings, store, web, models, topic)
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)
        web.close()
