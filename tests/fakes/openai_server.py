"""An OpenAI-compatible chat-completions server on loopback that replays a script of answers.

Tests start it, point a real client (litellm, through ``api_base``) at it and read back what
arrived: every request is logged with its headers and body, so a test can count retries and
see which key was sent. Each request takes the next reply of the script; a request after the
script ran out gets a 500 saying so, which fails the test loudly instead of hanging it.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer: a completion (status 200) or an error in OpenAI's error format."""

    status: int = 200
    content: str | None = ""
    prompt_tokens: int = 100
    completion_tokens: int = 50
    include_usage: bool = True
    delay_s: float = 0.0  # sleep before answering (longer than the client's timeout: a timeout)
    error_message: str = ""
    error_type: str = ""
    error_code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    finish_reason: str = "stop"
    no_choices: bool = False  # a 200 with an empty ``choices`` list (what a content filter may send)

    @classmethod
    def text(cls, content: str | None, **kw: Any) -> "Reply":
        return cls(content=content, **kw)

    @classmethod
    def error(cls, status: int, message: str, error_type: str = "", code: str | None = None, **kw: Any) -> "Reply":
        return cls(status=status, error_message=message, error_type=error_type, error_code=code, **kw)

    @classmethod
    def rate_limited(cls, retry_after_s: float | None = None) -> "Reply":
        headers = {} if retry_after_s is None else {"retry-after": str(retry_after_s)}
        return cls.error(429, "Rate limit reached for requests", "requests", "rate_limit_exceeded", headers=headers)

    @classmethod
    def unauthorized(cls) -> "Reply":
        return cls.error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")

    @classmethod
    def context_too_long(cls) -> "Reply":
        return cls.error(
            400,
            "This model's maximum context length is 128000 tokens. However, your messages resulted in "
            "130512 tokens. Please reduce the length of the messages.",
            "invalid_request_error",
            "context_length_exceeded",
        )

    @classmethod
    def server_error(cls, status: int = 500) -> "Reply":
        return cls.error(status, "The server had an error while processing your request.", "server_error")


@dataclass
class LoggedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float


class FakeOpenAIServer:
    """A threaded HTTP server on 127.0.0.1 (a free port) serving ``/v1/chat/completions``.

    ``api_key``: when set, a request whose bearer token differs gets a 401 without consuming a
    scripted reply, as a real provider answers a wrong key.
    """

    def __init__(self, script: list[Reply] | None = None, api_key: str | None = None):
        self.script: list[Reply] = list(script or [])
        self.api_key = api_key
        self.requests: list[LoggedRequest] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-openai", daemon=True
        )

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def chat_requests(self) -> list[LoggedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def add(self, *replies: Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    def start(self) -> "FakeOpenAIServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # Request handling -------------------------------------------------------------------------
    def _next(self, request: LoggedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self.api_key is not None and request.headers.get("authorization") != f"Bearer {self.api_key}":
                return Reply.unauthorized()
            if not self.script:
                return Reply.error(500, "fake server: the script ran out of replies", "server_error")
            return self.script.pop(0)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                request = LoggedRequest(
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                    at=time.monotonic(),
                )
                if not self.path.endswith("/chat/completions"):
                    with server._lock:
                        server.requests.append(request)
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
                    return
                reply = server._next(request)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.status == 200:
                    self._send(200, _completion_body(body.get("model", ""), reply), reply.headers)
                else:
                    error = {"message": reply.error_message, "type": reply.error_type, "param": None, "code": reply.error_code}
                    self._send(reply.status, {"error": error}, reply.headers)

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    # The client gave up (its timeout passed): what a slow provider sees too.
                    self.close_connection = True

        return Handler


def _completion_body(model: str, reply: Reply) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": f"chatcmpl-fake-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": []
        if reply.no_choices
        else [{"index": 0, "message": {"role": "assistant", "content": reply.content}, "finish_reason": reply.finish_reason}],
    }
    if reply.include_usage:
        body["usage"] = {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        }
    return body
