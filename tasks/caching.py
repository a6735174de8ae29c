"""Result caching: each stage is keyed by what it reads, never by the run.

A repeated run of an unchanged question finds every stage's result in Prefect's result storage (which
persists across processes) and makes no model call; a change of page content, sub-question, model, prompt,
caps or citeflow's own code misses, as it must. Each key hashes:
  plan        the question, the planner's (and query writer's) identity, the sub-question caps
  research    the query, the provider chain, the page caps, the store's identity, and for local search the
              state of its index; it expires after the web freshness window
  verify      the page id (a hash of its URL and content), the sub-question, the verifier's identity, the
              caps that change what it keeps
  synthesise  the claims and sources it is given, the synthesiser's identity
  critique    the same, the draft it judges, the critic's identity
A role's identity is its model, endpoint and generation settings, or "extractive"; CODE_VERSION (a hash of
citeflow's own source) stands for the prompt version and the extractive engine's rules, so changing either
misses the cache without anyone having to remember to bump a number.

A result that fell back to a default (a model reply unusable, the budget reached) is not cached: the next
run asks the model again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from prefect import Task
from prefect.cache_policies import CachePolicy
from prefect.context import TaskRunContext
from prefect.transactions import get_transaction

import citeflow
import tasks
from citeflow.config import Settings
from citeflow.contracts import SynthesisInput
from citeflow.llm.client import public_url
from citeflow.llm.settings import RoleName
from citeflow.roles import DegradationLog

P = ParamSpec("P")
R = TypeVar("R")

# Settings of a role that change what it replies, not how it is reached or retried.
_NOT_IDENTITY = {"api_key_env", "timeout_seconds", "max_attempts", "base_url"}


@cache
def code_version() -> str:
    """A hash of the source of citeflow and its stages: prompts, extractive rules and checks included."""
    digest = hashlib.sha256()
    for package in (citeflow, tasks):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def role_identity(settings: Settings, role: RoleName) -> str:
    """Who plays `role`: its model, endpoint and generation settings, or the extractive engine."""
    config = settings.model_settings().role(role)
    if config is None:
        return "extractive"
    generation = config.model_dump(mode="json", exclude=_NOT_IDENTITY)
    return json.dumps({"endpoint": public_url(config.base_url), **generation}, sort_keys=True)


def evidence_parts(request: SynthesisInput) -> dict[str, Any]:
    """What a role is shown of verified evidence, for a cache key: the run id each claim carries (the run
    that computed it) is not part of it."""
    return request.model_dump(mode="json", exclude={"claims": {"__all__": {"run_id"}}})


def digest(*parts: Any) -> str:
    """A stable hash of JSON-able parts (pydantic models are dumped first)."""
    plain = [part.model_dump(mode="json") if hasattr(part, "model_dump") else part for part in parts]
    return hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class StageKey(CachePolicy):
    """A cache policy whose key is a stage name and the parts `parts` derives from the task's inputs."""

    stage: str = ""
    parts: Callable[[dict[str, Any]], list[Any]] | None = None

    def compute_key(
        self,
        task_ctx: TaskRunContext,
        inputs: dict[str, Any],
        flow_parameters: dict[str, Any],
        **kwargs: Any,
    ) -> str | None:
        if self.parts is None:
            return None
        return f"citeflow-{self.stage}-{digest(code_version(), *self.parts(inputs))}"


@contextmanager
def cached_unless_degraded(degradations: DegradationLog) -> Iterator[None]:
    """Run a task body; if a role fell back to its default inside it, keep its result out of the cache."""
    with degradations.watch() as seen:
        yield
    if seen:
        transaction = get_transaction()
        if transaction is not None:  # None when a test calls the task's plain function directly
            transaction.write_on_commit = False


def fresh(task: Task[P, R], refresh: bool) -> Task[P, R]:
    """`task` as a run calls it: with `refresh`, computed again and its cached result replaced."""
    return task.with_options(refresh_cache=True) if refresh else task
