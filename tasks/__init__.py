"""The stages of a research run as plain functions: each takes the store and named records, and is
testable without Prefect. flows/research.py wraps them in thin Prefect tasks."""
