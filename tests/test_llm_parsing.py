"""Reply text to validated records: wrappings tolerated, faults reported exactly."""

from __future__ import annotations

import json

import pytest

from citeflow.contracts import Critique, Draft, DraftSentence
from citeflow.llm.parsing import ERROR_MAX_CHARS, ReplyInvalid, json_schema_format, json_text, parse_reply
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


def test_unknown_keys_are_ignored_at_every_level() -> None:
    reply = (
        '{"claims": [{"text": "Acme was founded in 1947.", "quote": "Acme Corp was founded in 1947.", '
        '"confidence": 0.9, "page": 2}], "notes": "all from the first paragraph"}'
    )
    parsed = parse_reply(reply, ClaimsReply)
    assert [(c.text, c.quote) for c in parsed.claims] == [
        ("Acme was founded in 1947.", "Acme Corp was founded in 1947.")
    ]


def test_a_null_stands_for_the_default_and_a_lone_string_for_a_list() -> None:
    draft = parse_reply(
        '{"sentences": [{"text": "Acme makes anvils.", "cites": "S1", "section": null}]}', Draft
    )
    assert draft == Draft(sentences=[DraftSentence(text="Acme makes anvils.", cites=["S1"], section="")])


def test_a_bare_list_stands_for_the_records_one_list() -> None:
    reply = 'Here are the claims:\n[{"text": "Acme makes anvils.", "quote": "Acme Corp makes anvils."}]'
    assert [c.quote for c in parse_reply(reply, ClaimsReply).claims] == ["Acme Corp makes anvils."]


@pytest.mark.parametrize("tag", ["think", "thinking", "reasoning", "Reflection"])
def test_reasoning_blocks_of_any_common_name_are_removed(tag: str) -> None:
    reply = f'<{tag}>I should answer {{"subquestions": []}}</{tag}>\n{PLAN}'
    assert parse_reply(reply, PlanReply).subquestions[0].query == "Acme founder"


def test_strictness_stays_on_what_matters() -> None:
    with pytest.raises(ReplyInvalid, match="claims.0.quote"):
        parse_reply('{"claims": [{"text": "Acme makes anvils.", "quote": 42}]}', ClaimsReply)
    with pytest.raises(ReplyInvalid, match="approved"):
        parse_reply('{"verdict": "fine"}', Critique)


def test_a_long_validation_error_is_cut_for_the_retry_prompt() -> None:
    reply = json.dumps({"claims": [{"text": "x" * 5000} for _ in range(20)]})
    with pytest.raises(ReplyInvalid) as caught:
        parse_reply(reply, ClaimsReply)
    assert len(str(caught.value)) <= ERROR_MAX_CHARS + 3
