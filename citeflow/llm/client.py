"""One client layer over the `openai` package for every role: retries, structured replies, call rows.

The openai client's own retries are off (max_retries=0) so that tenacity alone decides: transient
failures (408, 409, 429, 5xx, timeouts, dropped connections) are retried with exponential backoff and
jitter, honouring Retry-After, up to the role's max_attempts; other HTTP errors fail at once. Each
attempt is one model_calls row, with the prompt and reply (capped) unless the settings turn that off.
API keys are read from the environment when a client is built and never written to a row, a log line
or an error message.

Endpoints differ in what they accept, and what one refused is remembered for its (base URL, model):
a JSON-schema response format (else plain JSON is asked for), and the name of the output-token limit
(`max_tokens`, which OpenAI's reasoning models refuse, or `max_completion_tokens`, which older servers
refuse). Calls in flight per endpoint are capped by a semaphore taken before the call is sent, so time
spent waiting for a one-request-at-a-time server is spent here, never against the call's timeout. Where
many processes call one endpoint (several workers), the pool also takes a slot of a limit they share
(`SharedSlots`, which the tasks layer fills with a Prefect global concurrency limit named after the endpoint).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import urlsplit

from pydantic import BaseModel
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from citeflow.contracts import ModelCall, Outcome
from citeflow.llm import prompts
from citeflow.llm.budget import (
    Budget,
    CallLog,
    context_tokens_needed,
    estimate_prompt_tokens,
    estimate_tokens,
)
from citeflow.llm.discovery import NO_KEY, public_url
from citeflow.llm.errors import (
    BudgetExhausted,
    ContextTooSmall,
    InvalidReply,
    ModelRejected,
    ModelUnavailable,
)
from citeflow.llm.parsing import ReplyInvalid, json_schema_format, parse_reply
from citeflow.llm.prompts import Message
from citeflow.llm.settings import Limits, RoleConfig, RoleName

# openai is imported where a call is made, not here: importing it took 1.2 s of the 3.7 s `citeflow run`
# spent importing, and a run on the extractive engine never calls a model.
if TYPE_CHECKING:
    from openai import APIConnectionError, APIStatusError, OpenAI

logger = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)
Parsed = TypeVar("Parsed")  # what a plain-text reply reads as (`RoleClient.complete_read`)

TRANSIENT_STATUSES = frozenset({408, 409, 429})
# Statuses with which servers refuse a response_format or a parameter they do not support.
SCHEMA_REJECTION_STATUSES = frozenset({400, 422})
# The two names of the output-token limit; an endpoint takes one of them.
TOKEN_LIMIT_PARAMETERS = ("max_tokens", "max_completion_tokens")
# How servers word the refusal of a parameter ("Unsupported parameter: 'max_tokens' ... Use
# 'max_completion_tokens' instead", "Extra inputs are not permitted", "Unrecognized request argument").
_REFUSED_PARAMETER = re.compile(
    r"unsupported|not supported|unrecogni[sz]ed|unknown|extra (?:inputs|fields)"
    r"|not (?:allowed|permitted)|instead",
    re.IGNORECASE,
)
# Calls in flight per endpoint when the settings do not say: a server on this machine (llama.cpp,
# Ollama) usually serves one request at a time; a hosted one serves many.
LOCAL_CONCURRENCY = 1
# A hosted endpoint takes the pages a run verifies by default (caps.pages_verified_max) in one round.
REMOTE_CONCURRENCY = 16
# Characters a limit name may not hold (Prefect's names refuse them).
_NOT_IN_NAME = re.compile(r"[/%&<>]+")

# A slot of a limit shared by every process calling one endpoint: given the limit's name and its size,
# a context manager held while the call is in flight.
SharedSlots = Callable[[str, int], AbstractContextManager[object]]


def limit_name(base_url: str) -> str:
    """The name of the limit shared by the processes calling `base_url`: its public form (no user info,
    no query string, where keys hide), e.g. "citeflow-model-http:_127.0.0.1:8080_v1"."""
    return "citeflow-model-" + _NOT_IN_NAME.sub("_", public_url(base_url).rstrip("/"))


def is_local(url: str) -> bool:
    """Whether the endpoint is on this machine (a loopback address or localhost)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refuses_parameter(exc: ModelRejected, parameter: str) -> bool:
    """Whether a rejection is the endpoint refusing `parameter` (and not, say, a value of it too large)."""
    return (
        exc.status in SCHEMA_REJECTION_STATUSES
        and parameter in exc.problem
        and bool(_REFUSED_PARAMETER.search(exc.problem))
    )


def capped_text(text: str, limit: int) -> str:
    """`text` when it fits `limit` characters, else its head and tail with what was cut in between."""
    if len(text) <= limit:
        return text
    marker = f"\n[... {len(text) - limit:,} characters not stored ...]\n"
    keep = max(limit - len(marker), 0)
    return text[: keep - keep // 4] + marker + text[len(text) - keep // 4 :]


def messages_text(messages: list[Message]) -> str:
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in messages)


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
    from openai import APIConnectionError, APIStatusError

    if isinstance(exc, APIStatusError):
        return exc.status_code in TRANSIENT_STATUSES or exc.status_code >= 500
    return isinstance(exc, APIConnectionError)  # includes APITimeoutError


def _describe(exc: APIStatusError | APIConnectionError, timeout: float) -> str:
    """A failure in a few words, without the response body (which may echo request headers)."""
    from openai import APIStatusError, APITimeoutError

    if isinstance(exc, APIStatusError):
        return f"HTTP {exc.status_code}"
    if isinstance(exc, APITimeoutError):
        return f"no reply within {timeout:g} s"
    return "connection failed or dropped"


class EndpointPool:
    """OpenAI clients, concurrency slots and format support, shared by every role using an endpoint."""

    def __init__(
        self, limits: Limits, env: Mapping[str, str] | None = None, shared: SharedSlots | None = None
    ) -> None:
        self.limits = limits
        self.env = os.environ if env is None else env
        self.shared = shared
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, str, float], OpenAI] = {}
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._no_schema: set[tuple[str, str]] = set()
        self._token_parameter: dict[tuple[str, str], str] = {}

    def key(self, config: RoleConfig) -> str:
        return self.env.get(config.api_key_env) or NO_KEY

    def client(self, config: RoleConfig) -> OpenAI:
        from openai import OpenAI

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

    def concurrency(self, config: RoleConfig) -> int:
        if self.limits.max_concurrent_per_endpoint is not None:
            return self.limits.max_concurrent_per_endpoint
        return LOCAL_CONCURRENCY if is_local(config.base_url) else REMOTE_CONCURRENCY

    @contextmanager
    def slot(self, config: RoleConfig) -> Iterator[None]:
        """Held while one call is in flight: this process's slot first (so its waiting calls queue here,
        not on the shared limit), then the shared limit's, sized alike, when there is one."""
        with self._lock:
            if config.base_url not in self._slots:
                self._slots[config.base_url] = threading.BoundedSemaphore(self.concurrency(config))
            local = self._slots[config.base_url]
        with local:
            if self.shared is None:
                yield
                return
            with self.shared(limit_name(config.base_url), self.concurrency(config)):
                yield

    def token_parameter(self, config: RoleConfig) -> str:
        """The name this endpoint and model take for the output-token limit (max_tokens until refused)."""
        with self._lock:
            return self._token_parameter.get((config.base_url, config.model), TOKEN_LIMIT_PARAMETERS[0])

    def takes_token_parameter(self, config: RoleConfig, parameter: str) -> None:
        with self._lock:
            self._token_parameter[(config.base_url, config.model)] = parameter

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
        """A validated reply; one retry that shows the model its exact validation error, then InvalidReply.
        A prompt that would not fit the role's context window is not sent (ContextTooSmall)."""
        self.check_fits(messages)
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
            try:
                self.check_fits(retry)
            except ContextTooSmall:
                raise InvalidReply(
                    self.subject,
                    f"the reply failed validation, and a retry showing the error would not fit the "
                    f"context window; error: {first}",
                    "the role falls back to its safe default",
                ) from None
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

    def _row(
        self,
        messages: list[Message],
        outcome: Outcome,
        detail: str,
        *,
        attempt: int = 1,
        latency: float = 0.0,
        tokens: tuple[int, int] = (0, 0),
        estimated: bool = False,
        reply: str = "",
    ) -> ModelCall:
        """The model_calls row of one attempt (or of a call not made), with its prompt and reply capped."""
        limits = self.pool.limits
        stored = limits.store_call_text
        return ModelCall(
            run_id=self.run_id,
            role=self.role.value,
            model=self.config.model,
            endpoint=self.endpoint,
            prompt_tokens=tokens[0],
            completion_tokens=tokens[1],
            tokens_estimated=estimated,
            latency_seconds=round(latency, 4),
            attempt=attempt,
            outcome=outcome,
            prompt_hash=hashlib.sha256(
                json.dumps({"model": self.config.model, "messages": messages}, sort_keys=True).encode()
            ).hexdigest(),
            detail=detail,
            prompt=capped_text(messages_text(messages), limits.call_text_max_chars) if stored else "",
            reply=capped_text(reply, limits.call_text_max_chars) if stored else "",
        )

    def check_fits(self, messages: list[Message]) -> None:
        """ContextTooSmall when the prompt and the longest reply allowed may not fit the context window;
        the call not made is a skipped row that says how big the prompt was."""
        prompt = context_tokens_needed(messages)
        limit, context = self.config.max_output_tokens, self.config.context_tokens
        if prompt + limit <= context:
            return
        problem = (
            f"the prompt (about {prompt:,} tokens) and max_output_tokens ({limit:,}) may not fit its "
            f"{context:,}-token context window"
        )
        self.log.add_model_call(self._row(messages, Outcome.skipped, problem))
        raise ContextTooSmall(self.subject, problem, "the call was not made")

    def complete_read(self, messages: list[Message], read: Callable[[str], Parsed]) -> Parsed:
        """A plain-text reply as `read` reads it. A reply `read` refuses (ValueError saying what was wrong)
        is asked again once, with that problem; ValueError with the second problem when that fails too."""
        self.check_fits(messages)
        reply = self.complete(messages)
        try:
            return read(reply)
        except ValueError as problem:
            retry = [
                *messages,
                {"role": "assistant", "content": reply},
                {"role": "user", "content": f"That reply could not be used: {problem}."},
            ]
            self.check_fits(retry)
            return read(self.complete(retry))

    def complete(self, messages: list[Message], response_format: dict[str, Any] | None = None) -> str:
        """The reply text. A 400 refusing the output-token limit's name is retried once with its other
        name, which is then remembered for the endpoint and model."""
        parameter = self.pool.token_parameter(self.config)
        try:
            return self._complete(messages, response_format, parameter)
        except ModelRejected as exc:
            if not refuses_parameter(exc, parameter):
                raise
            other = next(name for name in TOKEN_LIMIT_PARAMETERS if name != parameter)
            text = self._complete(messages, response_format, other)
            # Remembered only now: failing with the other name too means it was refused for another reason.
            self.pool.takes_token_parameter(self.config, other)
            logger.info("%s refused %s; it takes %s", self.subject, parameter, other)
            return text

    def _complete(
        self, messages: list[Message], response_format: dict[str, Any] | None, parameter: str
    ) -> str:
        """The reply text, after up to max_attempts attempts; ModelUnavailable when all failed transiently."""
        from openai import APIConnectionError, APIStatusError

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
                    text = self._attempt(
                        messages, response_format, parameter, attempt.retry_state.attempt_number
                    )
        except (APIStatusError, APIConnectionError) as exc:
            raise ModelUnavailable(
                self.subject,
                f"{self.config.max_attempts} attempt(s) failed, the last with "
                f"{_describe(exc, self.config.timeout_seconds)}",
                "the role falls back to its safe default",
            ) from None
        return text

    def _attempt(
        self, messages: list[Message], response_format: dict[str, Any] | None, parameter: str, attempt: int
    ) -> str:
        from openai import APIConnectionError, APIStatusError, omit

        config = self.config
        prompt_estimate = estimate_prompt_tokens(messages)
        detail = "json_schema" if response_format else "plain json"

        def record(
            outcome: Outcome,
            note: str,
            tokens: tuple[int, int] = (0, 0),
            estimated: bool = False,
            reply: str = "",
        ) -> None:
            self.log.add_model_call(
                self._row(
                    messages,
                    outcome,
                    f"{detail}; {note}" if note else detail,
                    attempt=attempt,
                    latency=time.monotonic() - started,
                    tokens=tokens,
                    estimated=estimated,
                    reply=reply,
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
                            response_format=cast(Any, response_format) if response_format else omit,
                            **{parameter: config.max_output_tokens},
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
                note = "" if parameter == TOKEN_LIMIT_PARAMETERS[0] else parameter
                record(Outcome.ok, note, tokens, estimated, text)
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
        from openai import APIStatusError

        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, APIStatusError):
            after = retry_after_seconds(exc.response.headers)
            if after is not None:
                return min(after, self.pool.limits.retry_after_max_seconds)
        return float(self._backoff(state))

    def _log_retry(self, state: RetryCallState) -> None:
        from openai import APIConnectionError, APIStatusError

        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, APIStatusError | APIConnectionError):
            logger.warning(
                "%s: attempt %d failed (%s); next in %.1f s",
                self.subject,
                state.attempt_number,
                _describe(exc, self.config.timeout_seconds),
                state.next_action.sleep if state.next_action else 0.0,
            )
