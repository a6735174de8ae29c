"""From a model's reply text to a validated pydantic record, or an error a model can act on.

Endpoints that ignore or reject a JSON-schema response format still tend to answer in JSON, wrapped in
code fences, preceded by prose, or after a <think>...</think> block. Those wrappings are removed here;
anything else is a validation error whose exact text goes back to the model on the one retry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

T = TypeVar("T", bound=BaseModel)

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.DOTALL)


class ReplyInvalid(ValueError):
    """The reply is not the record asked for; the message says exactly why, for the retry prompt."""


def json_text(reply: str) -> str:
    """The reply without <think> blocks and, when it has one, only the inside of its first code fence."""
    text = _THINK.sub("", reply)
    # Some servers strip the opening tag but keep the closing one: everything before it is reasoning.
    if "</think>" in text.lower():
        text = text[text.lower().rindex("</think>") + len("</think>") :]
    fenced = _FENCE.search(text)
    return (fenced.group(1) if fenced else text).strip()


def _decode(text: str) -> Any:
    """The whole text as JSON, else the first JSON object inside it (a reply with prose around it)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as whole:
        decoder = json.JSONDecoder()
        for brace in re.finditer(r"\{", text):
            try:
                value, _ = decoder.raw_decode(text, brace.start())
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
        raise whole


def parse_reply(reply: str, reply_type: type[T], check: Callable[[T], None] | None = None) -> T:
    """Validate a reply against `reply_type`, then `check` (which raises ValueError for semantic faults)."""
    text = json_text(reply)
    try:
        data = _decode(text)
    except json.JSONDecodeError as exc:
        shown = text if len(text) <= 200 else text[:200] + "..."
        raise ReplyInvalid(
            f"the reply is not a JSON object ({exc.msg} at position {exc.pos}): {shown!r}"
        ) from exc
    try:
        record = reply_type.model_validate(data)
    except ValidationError as exc:
        raise ReplyInvalid(str(exc)) from exc
    if check is not None:
        try:
            check(record)
        except ValueError as exc:
            raise ReplyInvalid(str(exc)) from exc
    return record


def json_schema_format(reply_type: type[BaseModel]) -> dict[str, Any]:
    """The response_format asking an endpoint to constrain its reply to `reply_type`'s schema.

    strict is off: the contracts have optional fields, which strict mode forbids, and many
    OpenAI-compatible servers reject strict schemas; parse_reply validates the reply either way.
    """
    return {
        "type": "json_schema",
        "json_schema": {
            "name": reply_type.__name__,
            "schema": reply_type.model_json_schema(),
            "strict": False,
        },
    }
