"""Model-backed roles over any OpenAI-compatible endpoint.

settings = load_model_settings()                      # env, citeflow.toml, flags
models = build_engine(settings, store, run_id, caps=caps, fallback=extractive_engine())
models.engine                                         # a citeflow.roles.Engine
models.budget.may_start_revision(), models.budget.caveats(), models.degradations.drain()
"""
