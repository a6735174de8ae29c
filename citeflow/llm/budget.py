"""What a run may spend on models, checked before every call with that call's estimated size.

Tokens already spent are read from the call log (the model_calls rows), not from a counter, so a
resumed run counts what it spent before. Calls in flight hold a reservation of their worst case
(estimated prompt + max output tokens) until their row is written, so concurrent calls cannot
together cross the budget.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Protocol

from citeflow.contracts import ModelCall
from citeflow.llm.errors import BudgetExhausted
from citeflow.llm.settings import ModelSettings, Price

# Past this share of the budget no new revision starts: a revision is a synthesiser call plus a
# critic call, and starting one that cannot finish would waste the tokens it did spend.
REVISION_SHARE = 0.85
# Role markers and separators each message costs on top of its text.
MESSAGE_OVERHEAD_TOKENS = 4
# For fitting a context window the estimate must err high: tokenizers split JSON schemas, names and
# numbers finer than English prose (Qwen2.5 measured 3.3-4.2 characters a token on these prompts).
CONTEXT_CHARS_PER_TOKEN = 3


class CallLog(Protocol):
    """Where model_calls rows go: the evidence store, or MemoryCallLog in tests and `models check`."""

    def add_model_call(self, call: ModelCall) -> None: ...

    def run_tokens(self, run_id: str) -> tuple[int, int]:
        """(prompt tokens, completion tokens) summed over the run's calls."""
        ...


class MemoryCallLog:
    def __init__(self) -> None:
        self.calls: list[ModelCall] = []
        self._lock = threading.Lock()

    def add_model_call(self, call: ModelCall) -> None:
        with self._lock:
            self.calls.append(call)

    def run_tokens(self, run_id: str) -> tuple[int, int]:
        with self._lock:
            rows = [call for call in self.calls if call.run_id == run_id]
        return sum(r.prompt_tokens for r in rows), sum(r.completion_tokens for r in rows)


def estimate_tokens(text: str) -> int:
    """About four characters a token for English text; rounded up so estimates err high."""
    return math.ceil(len(text) / 4)


def estimate_prompt_tokens(messages: Sequence[Mapping[str, str]]) -> int:
    return sum(estimate_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in messages)


def context_tokens_needed(messages: Sequence[Mapping[str, str]]) -> int:
    """A high estimate of the tokens the messages take in a context window."""
    return sum(
        math.ceil(len(m["content"]) / CONTEXT_CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS for m in messages
    )


class Budget:
    def __init__(
        self,
        log: CallLog,
        run_id: str,
        token_limit: int,
        cost_limit: float | None = None,
        prices: Mapping[str, Price] | None = None,
    ) -> None:
        self._log = log
        self._run_id = run_id
        self.token_limit = token_limit
        self.cost_limit = cost_limit
        self._prices = dict(prices or {})
        self._lock = threading.Lock()
        self._reserved_tokens = 0
        self._reserved_cost = 0.0
        self._spent_cost = 0.0
        self.refused = 0
        self._unpriced_called: set[str] = set()  # under a cost limit: models counted in tokens only

    @classmethod
    def for_settings(cls, settings: ModelSettings, log: CallLog, run_id: str, token_limit: int) -> Budget:
        """A budget for a run, with the settings' cost limit and prices. A model with no price runs under
        the token limit alone, and `caveats` says so once."""
        return cls(log, run_id, token_limit, settings.limits.cost_budget, settings.prices)

    def used_tokens(self) -> int:
        return sum(self._log.run_tokens(self._run_id))

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        """What the call costs by the price table; 0.0 for a model with no price (tokens bound it)."""
        price = self._prices.get(model)
        if price is None:
            return 0.0
        return (prompt_tokens * price.input_per_million + completion_tokens * price.output_per_million) / 1e6

    @contextmanager
    def reserve(self, subject: str, model: str, prompt_tokens: int, max_output_tokens: int) -> Iterator[None]:
        """Hold room for one call, or raise BudgetExhausted without making it. Write the call's row inside."""
        need = prompt_tokens + max_output_tokens
        need_cost = self.cost(model, prompt_tokens, max_output_tokens)
        with self._lock:
            used = self.used_tokens() + self._reserved_tokens
            if used + need > self.token_limit:
                self.refused += 1
                raise BudgetExhausted(
                    subject,
                    f"the call needs up to {need:,} tokens and {used:,} of the {self.token_limit:,} token "
                    "budget are spent or in flight",
                    "the call was not made; the run finishes with what it has",
                )
            spent = self._spent_cost + self._reserved_cost
            if self.cost_limit is not None and spent + need_cost > self.cost_limit:
                self.refused += 1
                raise BudgetExhausted(
                    subject,
                    f"the call may cost up to {need_cost:.4f} and {spent:.4f} of the {self.cost_limit:.4f} "
                    "cost budget is spent or in flight",
                    "the call was not made; the run finishes with what it has",
                )
            self._reserved_tokens += need
            self._reserved_cost += need_cost
        try:
            yield
        finally:
            with self._lock:
                self._reserved_tokens -= need
                self._reserved_cost -= need_cost

    def charge(self, model: str, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            self._spent_cost += self.cost(model, prompt_tokens, completion_tokens)
            if self.cost_limit is not None and model not in self._prices:
                self._unpriced_called.add(model)

    def may_start_revision(self) -> bool:
        """False once REVISION_SHARE of the token or cost budget is spent: the report ships as it stands."""
        if self.used_tokens() >= REVISION_SHARE * self.token_limit:
            return False
        return self.cost_limit is None or self._spent_cost < REVISION_SHARE * self.cost_limit

    def caveats(self) -> list[str]:
        """Lines for the report when the budget changed what the run did, or could not hold as set."""
        lines = []
        if self._unpriced_called and self.cost_limit is not None:
            models = ", ".join(sorted(self._unpriced_called))
            if len(models) > 60:
                models = f"{len(self._unpriced_called)} models"
            lines.append(
                f"No price is known for {models}: its calls counted against the {self.token_limit:,}-token "
                f"budget only, not the {self.cost_limit:.4f} cost budget."
            )
        if self.refused:
            limits = f"{self.token_limit:,} tokens"
            if self.cost_limit is not None:
                limits += f" or {self.cost_limit:.4f} in cost"
            lines.append(
                f"The model budget ({limits}) was reached: {self.refused} model call(s) were not made, "
                "and the report was finished with what the run had by then."
            )
        return lines
