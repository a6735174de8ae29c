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
A role's identity is its model, endpoint and generation settings, or "extractive"; `code_version` of the
stage's module (a hash of its source and of every module of citeflow, tasks and storage it imports, at any
depth) stands for the prompt version and the extractive engine's rules, so changing either misses the
cache without anyone having to remember to bump a number, while editing the writer leaves every page's
verification cached.

What is cached is what is deterministic. A model reply is a property of (model identity, prompt, page):
a stage whose reply was unusable, or whose claims failed the checks, is cached with its fallback, and a
task returns its fallbacks with its result (`Computed`), so a reused result still says which of its calls
fell back and why. A fallback for a transient cause (a timeout, a connection error, a 429 or 5xx past the
retries, the budget spent) keeps the result out of the cache, so the next run asks the model again; a
cancelled or failed task is never cached.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Generic, ParamSpec, TypeVar

from prefect import Task
from prefect.cache_policies import CachePolicy
from prefect.context import TaskRunContext
from prefect.transactions import get_transaction

from citeflow.config import Settings
from citeflow.llm.client import public_url
from citeflow.llm.settings import RoleName
from citeflow.roles import Degradation, DegradationLog

P = ParamSpec("P")
R = TypeVar("R")

# Settings of a role that change what it replies, not how it is reached or retried.
_NOT_IDENTITY = {"api_key_env", "timeout_seconds", "max_attempts", "base_url"}


# The packages whose code decides what a stage computes (flows and cli only compose and present).
OWN_PACKAGES = ("citeflow", "tasks", "storage")


def _source(module: str) -> str | None:
    """The path of one of our modules' source, or None for a module of another package."""
    if module.split(".")[0] not in OWN_PACKAGES:
        return None
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:  # `from package import name` where name is no module
        return None
    return spec.origin if spec is not None and spec.origin and spec.origin.endswith(".py") else None


def _imported(module: str, source: bytes) -> set[str]:
    """The modules `source` imports, with the packages holding them (their __init__ runs too), and the
    submodules named by `from package import name`."""
    named: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            named.add(node.module)
            named.update(f"{node.module}.{alias.name}" for alias in node.names)
    parents = {".".join(name.split(".")[:n]) for name in named for n in range(1, name.count(".") + 1)}
    return named | parents


def stage_sources(module: str) -> dict[str, bytes]:
    """The source of `module` and of every module of OWN_PACKAGES it imports, at any depth, by name."""
    sources: dict[str, bytes] = {}
    waiting = [module]
    while waiting:
        name = waiting.pop()
        path = _source(name)
        if path is None or name in sources:
            continue
        with open(path, "rb") as file:
            sources[name] = file.read()
        waiting += _imported(name, sources[name]) - sources.keys()
    return sources


# ast.parse in two threads at once can fail ("SystemError: AST constructor recursion depth mismatch",
# seen when mapped researcher tasks first compute their keys together), so versions are computed one
# at a time, each once per process.
_versions_lock = threading.Lock()


def code_version(module: str) -> str:
    """A hash of `stage_sources(module)`: the prompts, extractive rules and checks a stage runs, and
    nothing it does not."""
    with _versions_lock:
        return _code_version(module)


@cache
def _code_version(module: str) -> str:
    sources = stage_sources(module)
    digest = hashlib.sha256()
    for name in sorted(sources):
        digest.update(name.encode())
        digest.update(sources[name])
    return digest.hexdigest()[:16]


def role_identity(settings: Settings, role: RoleName) -> str:
    """Who plays `role`: its model, endpoint and generation settings, or the extractive engine."""
    config = settings.model_settings().role(role)
    if config is None:
        return "extractive"
    generation = config.model_dump(mode="json", exclude=_NOT_IDENTITY)
    return json.dumps({"endpoint": public_url(config.base_url), **generation}, sort_keys=True)


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
        version = code_version(task_ctx.task.fn.__module__)
        return f"citeflow-{self.stage}-{digest(version, *self.parts(inputs))}"


T = TypeVar("T")


@dataclass(frozen=True)
class Computed(Generic[T]):
    """A stage's result and the fallbacks its calls made, cached together: a run reusing it shows the
    same caveats, while the error rows stay those of the run that computed it."""

    value: T
    fallbacks: list[Degradation]


@dataclass
class Fallbacks:
    """A run's fallbacks, taken from its stages' results as the flow receives them: those this run
    computed become its error rows; those of results reused from the cache were recorded by the run that
    computed them, and only count (and give the report the same caveats)."""

    computed: list[Degradation] = field(default_factory=list)
    reused: list[Degradation] = field(default_factory=list)

    def take(self, result: Computed[T], reused: bool) -> T:
        """The stage's value, its fallbacks noted."""
        (self.reused if reused else self.computed).extend(result.fallbacks)
        return result.value

    def drain(self) -> tuple[list[Degradation], list[Degradation]]:
        """(computed, reused) since the last drain."""
        taken = (self.computed, self.reused)
        self.computed, self.reused = [], []
        return taken


@contextmanager
def cached_unless_transient(degradations: DegradationLog) -> Iterator[list[Degradation]]:
    """Run a task body, collecting the fallbacks of its roles (for its `Computed` result); a fallback
    with a transient cause keeps the result out of the cache."""
    with degradations.watch() as seen:
        yield seen
    if any(degradation.transient for degradation in seen):
        transaction = get_transaction()
        if transaction is not None:  # None when a test calls the task's plain function directly
            transaction.write_on_commit = False


def fresh(task: Task[P, R], refresh: bool) -> Task[P, R]:
    """`task` as a run calls it: with `refresh`, computed again and its cached result replaced."""
    return task.with_options(refresh_cache=True) if refresh else task
