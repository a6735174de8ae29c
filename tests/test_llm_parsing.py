"""Reply text to validated records: wrappings tolerated, faults reported exactly."""

from __future__ import annotations

import pytest

from citeflow.contracts import Critique
from citeflow.llm.parsing import ReplyInvalid, json_schema_format, json_text, parse_reply
from citeflow.llm.prompts import ClaimsReply, PlanReply

PLAN = '{"subquestions": [{"text": "Who founded Acme?", "query": "Acme founder"}]}'


@pytest.mark.parametrize(
    "reply",
    [
        PLAN,
        f"```json\n{PLAN}\n```",
        f"```\n{PLAN}```",
        f"<think>The user wants {{a plan}}. Let me think.</think>\n{PLAN}",
        f"<think>reasoning</think>\n```json\n{PLAN}\n```\nHope this helps!",
        f"reasoning whose opening tag the server stripped</think>{PLAN}",
        f"Here is the plan:\n{PLAN}\nDone.",
        f"The plan {{as asked}}:\n{PLAN}\nwith {{braces}} after.",
    ],
)
def test_wrapped_json_is_found(reply: str) -> None:
    plan = parse_reply(reply, PlanReply)
    assert [q.query for q in plan.subquestions] == ["Acme founder"]


def test_prose_only_reply_names_the_json_error() -> None:
    with pytest.raises(ReplyInvalid, match="not a JSON object") as caught:
        parse_reply("I cannot help with that.", PlanReply)
    assert "I cannot help with that." in str(caught.value)


def test_schema_violation_carries_pydantic_message() -> None:
    with pytest.raises(ReplyInvalid) as caught:
        parse_reply('{"claims": [{"text": "x"}]}', ClaimsReply)
    assert "claims.0.quote" in str(caught.value) and "Field required" in str(caught.value)


def test_semantic_check_failure_becomes_reply_invalid() -> None:
    def no_problems(critique: Critique) -> None:
        raise ValueError("problem index 9 is out of range")

    with pytest.raises(ReplyInvalid, match="problem index 9 is out of range"):
        parse_reply('{"approved": true}', Critique, no_problems)


@pytest.mark.parametrize("reply", ["<think>{not this}</think>", f"<think>{PLAN}</think>"])
def test_think_block_only_is_invalid(reply: str) -> None:
    assert json_text(reply) == ""
    # even JSON that would validate is reasoning, not the answer, when it is inside the think block
    with pytest.raises(ReplyInvalid, match="^the reply is not a JSON object .*: ''$"):
        parse_reply(reply, PlanReply)


def test_json_schema_format_names_the_record() -> None:
    fmt = json_schema_format(ClaimsReply)
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "ClaimsReply"
    assert "claims" in fmt["json_schema"]["schema"]["properties"]
