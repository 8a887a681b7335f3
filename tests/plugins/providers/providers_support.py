"""Helpers for provider tests: hand-written SSE byte streams behind ``httpx.MockTransport``.

Imported by the test modules as ``providers_support`` (a unique name: ``conftest`` is
ambiguous with ``tests/conftest.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import httpx

SECRET = "sk-test-secret-0123456789abcdef"


def sse_bytes(events: Iterable[Any], *, done: bool = True) -> bytes:
    """``data: <json>`` frames (strings are sent verbatim, e.g. comments), then ``[DONE]``."""
    out = []
    for event in events:
        if isinstance(event, bytes):
            out.append(event)
        elif isinstance(event, str):
            out.append(event.encode())
        elif isinstance(event, tuple):  # (event name, payload) for the Responses API
            name, payload = event
            out.append(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode())
        else:
            out.append(f"data: {json.dumps(event)}\n\n".encode())
    if done:
        out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def sse_response(events: Iterable[Any], *, done: bool = True, split: int = 7) -> httpx.Response:
    """A streamed 200 response whose body arrives in small pieces (frames split mid-line)."""
    body = sse_bytes(events, done=done)

    def pieces() -> Iterator[bytes]:
        for i in range(0, len(body), split):
            yield body[i:i + split]

    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=pieces())


class Recorder:
    """A MockTransport handler that records requests and answers from a script."""

    def __init__(self, *answers: httpx.Response | Callable[[httpx.Request], httpx.Response]):
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return answer(request) if callable(answer) else answer

    def body(self, index: int = -1) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.requests[index].content)
        return data

    def raw(self, index: int = -1) -> bytes:
        return self.requests[index].content


