"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests through the real client.

Each test enqueues the replies the server gives, one per request in order: a message, an HTTP status
with a body and headers (Retry-After), a delay, usage figures or none, or a dropped connection. The
server records every request it received. With the queue empty it answers `default` when set, else
HTTP 500 "no scripted reply", so a test that makes more calls than it scripted fails loudly.

Like real servers it can also: list `models` at GET /v1/models; serve one request at a time (`serial`,
as llama.cpp and llama-cpp-python do: a request waits, connected, until the one before is answered);
and refuse one of the two names of the output-token limit (`refuses`), as OpenAI's reasoning models
refuse `max_tokens` and older servers refuse `max_completion_tokens`, without using up a scripted reply.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    content: str = ""  # the assistant message text (status 200)
    status: int = 200
    error: str = ""  # the error message for a status other than 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering
    usage: tuple[int, int] | None = (11, 7)  # (prompt, completion) tokens; None sends no usage
    drop: bool = False  # close the connection without answering


def json_reply(data: Any, **options: Any) -> Reply:
    return Reply(content=json.dumps(data), **options)


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]  # names lower-cased
    body: dict[str, Any]
    at: float  # time.monotonic() on arrival

    @property
    def prompt(self) -> str:
        """Every message's content, joined: what the model was shown."""
        return "\n".join(m["content"] for m in self.body["messages"])


# The reply type each role asks for (citeflow/llm/prompts.py), as named in its response_format.
ROLE_BY_SCHEMA = {
    "PlanReply": "planner",
    "FollowUpReply": "follow-up",  # the planner's second call of a run
    "QueriesReply": "query_writer",
    "ClaimsReply": "verifier",
    "Draft": "synthesiser",
    "Critique": "critic",
}
UNTRUSTED_BLOCK = re.compile(r'<(untrusted-[0-9a-f]{16}) label="([^"]*)">\n(.*?)\n</\1>', re.DOTALL)
EVIDENCE_LINE = re.compile(r"^\[(S\d+)\] \((q\d+)\) (.+)$", re.MULTILINE)


def role_of(received: Received) -> str:
    """Which role sent the request, from the reply type it asks for."""
    schema = received.body.get("response_format", {}).get("json_schema", {}).get("name", "")
    if not schema and "F<number>: <one sentence" in received.prompt:
        return "digest"  # the synthesiser writing an open question's digest, in lines, not JSON
    if not schema and "'S<number>: full'" in received.prompt:
        return "judge"  # `citeflow eval`'s model judge of a key fact, one line
    return ROLE_BY_SCHEMA.get(schema, "unknown")


# What servers answer when they refuse a token-limit parameter (OpenAI's wording for max_tokens).
REFUSAL = {
    "max_tokens": "Unsupported parameter: 'max_tokens' is not supported with this model. "
    "Use 'max_completion_tokens' instead.",
    "max_completion_tokens": "Unrecognized request argument supplied: max_completion_tokens",
}


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver listens with a backlog of 5: a run's 16 concurrent verify calls overflowed it, and each
    # dropped connection attempt was retried by the kernel only after a second.
    request_queue_size = 128


class ScriptedServer:
    def __init__(
        self, models: list[str] | None = None, serial: bool = False, refuses: str = "", port: int = 0
    ) -> None:
        self.replies: deque[Reply] = deque()
        self.default: Reply | None = None
        self.requests: list[Received] = []
        self.listings = 0  # GET /v1/models requests
        self.models = models if models is not None else ["scripted-model"]
        self.refuses = refuses
        self.max_in_flight = 0  # requests the server was answering at once
        self.max_connected = 0  # requests received and not yet answered, queued ones included
        self._in_flight = 0
        self._connected = 0
        self._lock = threading.Lock()
        self._serving = threading.Lock() if serial else None
        self._http = _HttpServer(("127.0.0.1", port), self._handler())
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()

    def reply_to(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        if self.refuses and self.refuses in received.body:
            return Reply(status=400, error=REFUSAL[self.refuses])
        return self.answer(received)

    def answer(self, received: Received) -> Reply:
        """The next scripted reply; a subclass may answer by what the request asks instead."""
        with self._lock:
            if self.replies:
                return self.replies.popleft()
            return self.default or Reply(status=500, error="no scripted reply left")

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") != "/v1/models":
                    self._send(404, {"error": {"message": "not found", "type": "scripted", "code": None}})
                    return
                with server._lock:
                    server.listings += 1
                data = [
                    {"id": name, "object": "model", "created": 0, "owned_by": "scripted"}
                    for name in server.models
                ]
                self._send(200, {"object": "list", "data": data})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                headers = {name.lower(): value for name, value in self.headers.items()}
                with server._lock:
                    server._connected += 1
                    server.max_connected = max(server.max_connected, server._connected)
                try:
                    if server._serving is None:
                        self._serve(body, headers)
                    else:
                        with server._serving:  # one at a time: the others wait here, connected
                            self._serve(body, headers)
                finally:
                    with server._lock:
                        server._connected -= 1

            def _serve(self, body: dict[str, Any], headers: dict[str, str]) -> None:
                reply = server.reply_to(Received(self.path, headers, body, time.monotonic()))
                try:
                    time.sleep(reply.delay)
                    if reply.drop:
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    self._answer(reply, body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up first (timeout)
                    self.close_connection = True
                finally:
                    server._done()

            def _send(
                self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _answer(self, reply: Reply, request: dict[str, Any]) -> None:
                if reply.status == 200:
                    payload: dict[str, Any] = {
                        "id": f"chatcmpl-{len(server.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": request.get("model", ""),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": reply.content},
                                "finish_reason": "stop",
                            }
                        ],
                    }
                    if reply.usage is not None:
                        prompt, completion = reply.usage
                        payload["usage"] = {
                            "prompt_tokens": prompt,
                            "completion_tokens": completion,
                            "total_tokens": prompt + completion,
                        }
                else:
                    payload = {"error": {"message": reply.error, "type": "scripted", "code": None}}
                self._send(reply.status, payload, reply.headers)

        return Handler
