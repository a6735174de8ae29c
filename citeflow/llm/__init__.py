"""Model-backed roles over any OpenAI-compatible endpoint.

settings = load_model_settings()                      # env, citeflow.toml, flags
models = build_engine(settings, store, run_id, caps=caps, fallback=extractive_engine())
models.engine                                         # a citeflow.roles.Engine
models.budget.may_start_revision(), models.budget.caveats(), models.degradations.drain()
"""

from citeflow.llm.budget import Budget, CallLog, MemoryCallLog
from citeflow.llm.check import RoleCheck, check_models
from citeflow.llm.roles import (
    Degradation,
    DegradationLog,
    LoopEnd,
    ModelEngine,
    build_engine,
    loop_caveat,
    revision_end,
)
from citeflow.llm.settings import ModelSettings, RoleConfig, RoleName, load_model_settings

__all__ = [
    "Budget",
    "CallLog",
    "Degradation",
    "DegradationLog",
    "LoopEnd",
    "MemoryCallLog",
    "ModelEngine",
    "ModelSettings",
    "RoleCheck",
    "RoleConfig",
    "RoleName",
    "build_engine",
    "check_models",
    "load_model_settings",
    "loop_caveat",
    "revision_end",
]
