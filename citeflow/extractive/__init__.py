"""The extractive engine: every role played with no model, one module per step.

question.py reads a question's shape (its entities, sides and what it asks for), answer.py finds the
answer among verified claims and orders the report around it, and engine.py plays the planner,
verifier, synthesiser and critic roles with them. It is a real offline mode and the floor of every
model run.
"""

from citeflow.extractive.engine import (
    ExtractiveCritic,
    ExtractivePlanner,
    ExtractiveSynthesiser,
    ExtractiveVerifier,
    extractive_engine,
)

__all__ = [
    "ExtractiveCritic",
    "ExtractiveVerifier",
    "ExtractivePlanner",
    "ExtractiveSynthesiser",
    "extractive_engine",
]
