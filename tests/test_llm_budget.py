"""The run budget: refusal before a call that could cross it, reservations, the 85% rule, cost."""

from __future__ import annotations

import pytest

from citeflow.contracts import ModelCall, Outcome
from citeflow.llm.budget import Budget, MemoryCallLog, estimate_prompt_tokens
from citeflow.llm.errors import BudgetExhausted
from citeflow.llm.settings import Price


def spent(log: MemoryCallLog, prompt: int, completion: int, run_id: str = "r1") -> None:
    log.add_model_call(
        ModelCall(
            run_id=run_id,
            role="planner",
            model="m",
            endpoint="http://127.0.0.1:9/v1",
            prompt_tokens=prompt,
            completion_tokens=completion,
            tokens_estimated=False,
            latency_seconds=0.1,
            attempt=1,
            outcome=Outcome.ok,
            prompt_hash="h",
        )
    )


def test_call_that_would_cross_is_refused_and_counted() -> None:
    log = MemoryCallLog()
    budget = Budget(log, "r1", token_limit=1000)
    spent(log, 600, 200)
    spent(log, 5000, 5000, run_id="another run")  # other runs do not count
    with budget.reserve("planner", "m", 100, 100):  # 800 + 200 = 1000: exactly at the limit is allowed
        pass
    with pytest.raises(BudgetExhausted, match="needs up to 201 tokens and 800 of the 1,000"):
        budget.reserve("planner", "m", 101, 100).__enter__()
    assert budget.refused == 1
    assert budget.caveats() and "1 model call(s) were not made" in budget.caveats()[0]


def test_reservations_in_flight_count_against_the_budget() -> None:
    budget = Budget(MemoryCallLog(), "r1", token_limit=1000)
    with budget.reserve("verifier", "m", 300, 300), pytest.raises(BudgetExhausted):
        budget.reserve("verifier", "m", 300, 300).__enter__()
    with budget.reserve("verifier", "m", 300, 300):  # released: room again
        pass


def test_no_revision_past_85_percent() -> None:
    log = MemoryCallLog()
    budget = Budget(log, "r1", token_limit=1000)
    spent(log, 800, 49)
    assert budget.may_start_revision()
    spent(log, 1, 0)
    assert not budget.may_start_revision()


def test_cost_budget_from_price_table() -> None:
    prices = {"m": Price(input_per_million=1_000.0, output_per_million=2_000.0)}  # 0.001 and 0.002 a token
    budget = Budget(MemoryCallLog(), "r1", token_limit=10**9, cost_limit=1.0, prices=prices)
    for _ in range(3):  # each call may cost up to 0.3 and does
        with budget.reserve("critic", "m", 100, 100):
            budget.charge("m", 100, 100)
    assert not budget.may_start_revision()  # 0.9 spent of 1.0
    with pytest.raises(BudgetExhausted, match="may cost up to 0.3000 and 0.9000 of the 1.0000 cost budget"):
        budget.reserve("critic", "m", 100, 100).__enter__()
    assert "or 1.0000 in cost" in budget.caveats()[0]


def test_prompt_estimate_errs_high() -> None:
    messages = [{"role": "user", "content": "x" * 401}]
    assert estimate_prompt_tokens(messages) == 101 + 4


def test_a_model_with_no_price_runs_under_the_token_budget_with_one_caveat() -> None:
    prices = {"priced": Price(input_per_million=1_000.0, output_per_million=1_000.0)}
    budget = Budget(MemoryCallLog(), "r1", token_limit=10**6, cost_limit=0.5, prices=prices)
    for _ in range(3):
        with budget.reserve("planner", "qwen3-4b", 10_000, 10_000):  # would cost 20 at the other price
            budget.charge("qwen3-4b", 10_000, 10_000)
    assert budget.may_start_revision()  # it spent nothing the cost budget counts
    assert budget.caveats() == [
        "No price is known for qwen3-4b: its calls counted against the 1,000,000-token budget only, "
        "not the 0.5000 cost budget."
    ]
    assert Budget(MemoryCallLog(), "r1", token_limit=10**6).caveats() == []  # no cost budget: nothing to say
