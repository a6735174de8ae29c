"""Prefect flows. Prefect reads its settings when first imported, so citeflow's defaults are set here."""

from citeflow.prefect_env import apply_prefect_defaults

apply_prefect_defaults()
