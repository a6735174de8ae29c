"""One client layer over the `openai` package for every role: retries, structured replies, call rows.

The openai client's own retries are off (max_retries=0) so that tenacity alone decides: transient
failures (408, 409, 429, 5xx, timeouts, dropped connections) are retried with exponential backoff and
jitter, honouring Retry-After, up to the role's max_attempts; other HTTP errors fail at once. Each
attempt is one model_calls row. API keys are read from the environment when a client is built and
never written to a row, a log line or an error message.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

from openai import APIConnectionError, APIStatusError, APITimeoutError, OpenAI, omit
from pydantic import BaseModel
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from citeflow.contracts import ModelCall, Outcome
from citeflow.llm import prompts
from citeflow.llm.budget import Budget, CallLog, estimate_prompt_tokens, estimate_tokens
from citeflow.llm.errors import BudgetExhausted, InvalidReply, ModelRejected, ModelUnavailable
from citeflow.llm.parsing import ReplyInvalid, json_schema_format, parse_reply
from citeflow.llm.prompts import Message
from citeflow.llm.settings import Limits, RoleConfig, RoleName

logger = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)

TRANSIENT_STATUSES = frozenset({408, 409, 429})
# Statuses with which servers refuse a response_format they do not support.
SCHEMA_REJECTION_STATUSES = frozenset({400, 422})
# Sent when the key variable is unset: local servers ignore the key, and the openai client needs one.
NO_KEY = "unset"


def public_url(url: str) -> str:
    """The endpoint as it may be stored or shown: user info and query string (where keys hide) removed."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The wait a server asked for, from retry-after-ms, or Retry-After as seconds or an HTTP date."""
    if "retry-after-ms" in headers:
        try:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)  # a negative wait makes sleep() raise
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, APIStatusError):
        return exc.status_code in TRANSIENT_STATUSES or exc.status_code >= 500
    return isinstance(exc, APIConnectionError)  # includes APITimeoutError


def _describe(exc: APIStatusError | APIConnectionError, timeout: float) -> str:
    """A failure in a few words, without the response body (which may echo request headers)."""
    if isinstance(exc, APIStatusError):
        return f"HTTP {exc.status_code}"
    if isinstance(exc, APITimeoutError):
        return f"no reply within {timeout:g} s"
    return "connection failed or dropped"


class EndpointPool:
    """OpenAI clients, concurrency slots and format support, shared by every role using an endpoint."""

    def __init__(self, limits: Limits, env: Mapping[str, str] | None = None) -> None:
        self.limits = limits
        self.env = os.environ if env is None else env
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, str, float], OpenAI] = {}
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._no_schema: set[tuple[str, str]] = set()

    def key(self, config: RoleConfig) -> str:
        return self.env.get(config.api_key_env) or NO_KEY

    def client(self, config: RoleConfig) -> OpenAI:
        ident = (config.base_url, config.api_key_env, config.timeout_seconds)
        with self._lock:
            if ident not in self._clients:
                self._clients[ident] = OpenAI(
                    base_url=config.base_url,
                    api_key=self.key(config),
                    timeout=config.timeout_seconds,
                    max_retries=0,
                )
            return self._clients[ident]

    def slot(self, config: RoleConfig) -> threading.BoundedSemaphore:
        with self._lock:
            return self._slots.setdefault(
                config.base_url, threading.BoundedSemaphore(self.limits.max_concurrent_per_endpoint)
            )

    def accepts_schema(self, config: RoleConfig) -> bool:
        with self._lock:
            return (config.base_url, config.model) not in self._no_schema

    def refuses_schema(self, config: RoleConfig) -> None:
        with self._lock:
            self._no_schema.add((config.base_url, config.model))


class RoleClient:
    """Calls one role's model: every attempt budgeted, bounded, retried when transient, and logged."""

    def __init__(
        self,
        role: RoleName,
        config: RoleConfig,
        pool: EndpointPool,
        budget: Budget,
        log: CallLog,
        run_id: str,
    ) -> None:
        self.role = role
        self.config = config
        self.pool = pool
        self.budget = budget
        self.log = log
        self.run_id = run_id
        self.endpoint = public_url(config.base_url)
        self.subject = f"{role.value} model {config.model} at {self.endpoint}"
        self._backoff = wait_exponential_jitter(
            multiplier=pool.limits.backoff_seconds,
            max=pool.limits.backoff_max_seconds,
            jitter=pool.limits.backoff_seconds,
        )

    def structured(
        self, messages: list[Message], reply_type: type[T], check: Callable[[T], None] | None = None
    ) -> T:
        """A validated reply; one retry that shows the model its exact validation error, then InvalidReply."""
        schema = json_schema_format(reply_type) if self.pool.accepts_schema(self.config) else None
        text, schema = self._complete_in_format(messages, schema)
        try:
            return parse_reply(text, reply_type, check)
        except ReplyInvalid as first:
            retry = [
                *messages,
                {"role": "assistant", "content": text},
                {"role": "user", "content": prompts.validation_retry(str(first))},
            ]
            text, _ = self._complete_in_format(retry, schema)
            try:
                return parse_reply(text, reply_type, check)
            except ReplyInvalid as second:
                raise InvalidReply(
                    self.subject,
                    f"the reply failed validation twice; last error: {second}",
                    "the role falls back to its safe default",
                ) from None

    def _complete_in_format(
        self, messages: list[Message], schema: dict[str, Any] | None
    ) -> tuple[str, dict[str, Any] | None]:
        """Ask with the JSON-schema format; if the endpoint refuses it, ask again for plain JSON."""
        if schema is None:
            return self.complete(messages), None
        try:
            return self.complete(messages, schema), schema
        except ModelRejected as exc:
            if exc.status not in SCHEMA_REJECTION_STATUSES:
                raise
            text = self.complete(messages)
            # Marked only now: a request that fails without the format too was refused for another reason.
            self.pool.refuses_schema(self.config)
            logger.info("%s refused a JSON-schema response format; asking for plain JSON", self.subject)
            return text, None

    def complete(self, messages: list[Message], response_format: dict[str, Any] | None = None) -> str:
        """The reply text, after up to max_attempts attempts; ModelUnavailable when all failed transiently."""
        retrying = Retrying(
            stop=stop_after_attempt(self.config.max_attempts),
            wait=self._wait,
            retry=retry_if_exception(_is_transient),
            before_sleep=self._log_retry,
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    text = self._attempt(messages, response_format, attempt.retry_state.attempt_number)
        except (APIStatusError, APIConnectionError) as exc:
            raise ModelUnavailable(
                self.subject,
                f"{self.config.max_attempts} attempt(s) failed, the last with "
                f"{_describe(exc, self.config.timeout_seconds)}",
                "the role falls back to its safe default",
            ) from None
        return text

    def _attempt(self, messages: list[Message], response_format: dict[str, Any] | None, attempt: int) -> str:
        config = self.config
        prompt_estimate = estimate_prompt_tokens(messages)
        prompt_hash = hashlib.sha256(
            json.dumps({"model": config.model, "messages": messages}, sort_keys=True).encode()
        ).hexdigest()
        detail = "json_schema" if response_format else "plain json"

        def record(
            outcome: Outcome, note: str, tokens: tuple[int, int] = (0, 0), estimated: bool = False
        ) -> None:
            self.log.add_model_call(
                ModelCall(
                    run_id=self.run_id,
                    role=self.role.value,
                    model=config.model,
                    endpoint=self.endpoint,
                    prompt_tokens=tokens[0],
                    completion_tokens=tokens[1],
                    tokens_estimated=estimated,
                    latency_seconds=round(time.monotonic() - started, 4),
                    attempt=attempt,
                    outcome=outcome,
                    prompt_hash=prompt_hash,
                    detail=f"{detail}; {note}" if note else detail,
                )
            )

        started = time.monotonic()
        try:
            with self.budget.reserve(self.subject, config.model, prompt_estimate, config.max_output_tokens):
                with self.pool.slot(config):
                    started = time.monotonic()
                    try:
                        reply = self.pool.client(config).chat.completions.create(
                            model=config.model,
                            messages=cast(Any, messages),
                            temperature=config.temperature,
                            max_tokens=config.max_output_tokens,
                            response_format=cast(Any, response_format) if response_format else omit,
                        )
                    except (APIStatusError, APIConnectionError) as exc:
                        record(Outcome.failed, _describe(exc, config.timeout_seconds))
                        if not isinstance(exc, APIStatusError) or _is_transient(exc):
                            raise  # tenacity retries it
                        raise ModelRejected(
                            self.subject,
                            f"HTTP {exc.status_code}: {self._redacted(exc.message)}",
                            exc.status_code,
                        ) from None
                text = (reply.choices[0].message.content or "") if reply.choices else ""
                if reply.usage is not None:
                    tokens, estimated = (reply.usage.prompt_tokens, reply.usage.completion_tokens), False
                else:
                    tokens, estimated = (prompt_estimate, estimate_tokens(text)), True
                # The row is written before the reservation is released, so the budget never misses it.
                record(Outcome.ok, "", tokens, estimated)
                self.budget.charge(config.model, *tokens)
                return text
        except BudgetExhausted as exc:  # only reserve() raises it: the call was not made
            record(Outcome.skipped, exc.problem)
            raise

    def _redacted(self, message: str) -> str:
        """A server message fit to show: the key removed should the server echo it, and kept short."""
        key = self.pool.key(self.config)
        if key != NO_KEY:
            message = message.replace(key, "[key]")
        return message if len(message) <= 300 else message[:300] + "..."

    def _wait(self, state: RetryCallState) -> float:
        """Retry-After when the server sent one (capped), else exponential backoff with jitter."""
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, APIStatusError):
            after = retry_after_seconds(exc.response.headers)
            if after is not None:
                return min(after, self.pool.limits.retry_after_max_seconds)
        return float(self._backoff(state))

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, APIStatusError | APIConnectionError):
            logger.warning(
                "%s: attempt %d failed (%s); next in %.1f s",
                self.subject,
                state.attempt_number,
                _describe(exc, self.config.timeout_seconds),
                state.next_action.sleep if state.next_action else 0.0,
            )
