"""Scheduled deployments: prefect.yaml declares them; serve.py runs them without a work pool."""
