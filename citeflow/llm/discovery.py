"""Which model an endpoint serves, for settings that name an endpoint but no model.

A local server (llama.cpp, Ollama with one model pulled, vLLM) usually lists exactly one model at
/v1/models, and a user who sets only OPENAI_BASE_URL means that one. With several or none listed there
is no safe guess, so the settings fail naming CITEFLOW_MODEL and what the endpoint offers.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from citeflow.errors import InputError

# Listing models is one small GET: a server that does not answer it in this time is not serving.
LIST_TIMEOUT_SECONDS = 15.0
# Shown in the error at most; an endpoint may list hundreds of hosted models.
MODELS_SHOWN = 8
# Sent when no key is set: local servers ignore it, and the openai client needs one.
NO_KEY = "unset"


def public_url(url: str) -> str:
    """The endpoint as it may be shown: user info and query string (where keys hide) removed."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def list_models(base_url: str, key: str) -> list[str]:
    """The model ids the endpoint lists at /models, in its order; InputError when it cannot say."""
    from openai import APIConnectionError, APIStatusError, OpenAI  # slow to import: see citeflow.llm.client

    client = OpenAI(base_url=base_url, api_key=key or NO_KEY, timeout=LIST_TIMEOUT_SECONDS, max_retries=0)
    try:
        return [model.id for model in client.models.list()]
    except APIStatusError as exc:
        problem = f"HTTP {exc.status_code} when listing its models"
    except APIConnectionError:
        problem = "no answer when listing its models"
    finally:
        client.close()
    raise InputError(
        f"OPENAI_BASE_URL {public_url(base_url)}",
        f"{problem}; set CITEFLOW_MODEL (or model in citeflow.toml) to the model to use",
        "no model was called",
    )


def only_model(base_url: str, key: str) -> str:
    """The endpoint's one model, or InputError naming CITEFLOW_MODEL and the models it offers."""
    models = list_models(base_url, key)
    if len(models) == 1:
        return models[0]
    offered = ", ".join(models[:MODELS_SHOWN]) + (", ..." if len(models) > MODELS_SHOWN else "")
    problem = (
        f"lists {len(models)} models ({offered}); set CITEFLOW_MODEL (or model in citeflow.toml) to one"
        if models
        else "lists no model; set CITEFLOW_MODEL (or model in citeflow.toml) to the model to use"
    )
    raise InputError(f"OPENAI_BASE_URL {public_url(base_url)}", problem, "no model was called")
