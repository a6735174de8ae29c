"""From a model's reply text to a validated pydantic record, or an error a model can act on.

Endpoints that ignore or reject a JSON-schema response format still tend to answer in JSON, wrapped in
code fences, preceded by prose, or after a <think>...</think> block. Reading is tolerant where tolerance
loses nothing: those wrappings are removed, keys the record does not have are ignored, a null stands for
a field's default, a bare list stands for the record's one list, and a lone string for a list of strings.
Caps on list lengths are the roles' to apply by cutting, never a reason to reject a reply. What matters
(quotes, ids, names) is checked mechanically after parsing. Anything else is a validation error whose
exact text goes back to the model on the one retry.
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Callable
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

T = TypeVar("T", bound=BaseModel)

# Reasoning blocks that small and "thinking" models put before their answer.
_REASONING_TAGS = "think|thinking|reasoning|reflection"
_THINK = re.compile(rf"<({_REASONING_TAGS})>.*?</\1>", re.DOTALL | re.IGNORECASE)
_UNCLOSED_THINK_END = re.compile(rf"</(?:{_REASONING_TAGS})>", re.IGNORECASE)
_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.DOTALL)
# In a validation error shown to the model, the offending input it sent is cut to this many characters.
ERROR_MAX_CHARS = 1500


class ReplyInvalid(ValueError):
    """The reply is not the record asked for; the message says exactly why, for the retry prompt."""


def json_text(reply: str) -> str:
    """The reply without <think> blocks and, when it has one, only the inside of its first code fence."""
    text = _THINK.sub("", reply)
    # Some servers strip the opening tag but keep the closing one: everything before it is reasoning.
    ends = list(_UNCLOSED_THINK_END.finditer(text))
    if ends:
        text = text[ends[-1].end() :]
    fenced = _FENCE.search(text)
    return (fenced.group(1) if fenced else text).strip()


def _decode(text: str) -> Any:
    """The whole text as JSON, else the first JSON object, or list of objects, inside it."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as whole:
        decoder = json.JSONDecoder()
        for at in re.finditer(r"[\[{]", text):
            try:
                value, _ = decoder.raw_decode(text, at.start())
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict) or (value and all(isinstance(item, dict) for item in value)):
                return value
        raise whole


def _unwrap_optional(annotation: Any) -> Any:
    """X for `X | None` (and Optional[X]); the annotation itself otherwise."""
    if get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation


def _model_type(annotation: Any) -> type[BaseModel] | None:
    annotation = _unwrap_optional(annotation)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _list_item(annotation: Any) -> Any | None:
    """The item type of a `list[X]` annotation, or None when it is not a list."""
    annotation = _unwrap_optional(annotation)
    if get_origin(annotation) is list:
        (item,) = get_args(annotation) or (Any,)
        return item
    return None


def tolerant(data: Any, record: type[BaseModel]) -> Any:
    """`data` reshaped towards `record` without guessing at meaning: unknown keys dropped, a null for a
    field with a default dropped (the default applies), a lone string for a list of strings listed, and
    the same inside nested records. A bare list stands for a record whose only list field it fills."""
    lists = [name for name, field in record.model_fields.items() if _list_item(field.annotation) is not None]
    if isinstance(data, list) and len(lists) == 1:
        data = {lists[0]: data}
    if not isinstance(data, dict):
        return data
    shaped: dict[str, Any] = {}
    for name, field in record.model_fields.items():
        if name not in data:
            continue
        value = data[name]
        optional = _unwrap_optional(field.annotation) is not field.annotation
        if value is None and not field.is_required() and not optional:
            continue
        item = _list_item(field.annotation)
        nested = _model_type(field.annotation)
        if item is str and isinstance(value, str):
            value = [value]
        elif item is not None and isinstance(value, list) and _model_type(item) is not None:
            value = [tolerant(element, _model_type(item)) for element in value]  # type: ignore[arg-type]
        elif nested is not None:
            value = tolerant(value, nested)
        shaped[name] = value
    return shaped


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
        record = reply_type.model_validate(tolerant(data, reply_type))
    except ValidationError as exc:
        message = str(exc)
        shown = message if len(message) <= ERROR_MAX_CHARS else message[:ERROR_MAX_CHARS] + "..."
        raise ReplyInvalid(shown) from exc
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
