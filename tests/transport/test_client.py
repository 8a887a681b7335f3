"""Kernel HTTP: retry timing, typed errors, secrecy, stream ceilings, cancellation."""

from __future__ import annotations

import email.utils
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ctxfold import (
    AuthenticationError,
    ChatRequest,
    ChatResponse,
    ContextLimitError,
    HttpProvider,
    Message,
    ProviderConnectionError,
    ProviderRequestError,
    ProviderResponseError,
    ProviderTimeoutError,
    RateLimitError,
    ServerError,
)
from ctxfold.secrets import redact_text as redact
from ctxfold.transport.client import HttpClient, HttpSettings
from ctxfold.transport.errors import stream_cut
from ctxfold.transport.provider import partial_message_of
from ctxfold.transport.retry import calculate_retry_timeout

KEY = "sk-kernel-secret-9f8e7d6c5b4a"
ENV = "CTXFOLD_TEST_KEY"


# -- calculate_retry_timeout (pure) ------------------------------------------------------------


def test_retry_after_ms_wins():
    assert calculate_retry_timeout(0, {"retry-after-ms": "1500", "Retry-After": "9"}) == 1.5


def test_retry_after_seconds_and_http_date():
    assert calculate_retry_timeout(3, {"Retry-After": "7"}) == 7.0
    now = 1_800_000_000.0
    date = email.utils.formatdate(now + 12, usegmt=True)
    assert calculate_retry_timeout(0, {"retry-after": date}, now=now) == pytest.approx(12.0)


@pytest.mark.parametrize("value", ["0", "-3", "600", "garbage"])
def test_unusable_retry_after_falls_back_to_backoff(value):
    assert calculate_retry_timeout(1, {"Retry-After": value}, jitter=0.0) == 1.0


def test_backoff_doubles_caps_and_jitters():
    assert [calculate_retry_timeout(n, {}, jitter=0.0) for n in range(6)] == [
        0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert calculate_retry_timeout(2, None, jitter=0.999) == pytest.approx(2.0 * 0.75025)
    for _ in range(50):
        assert 0.375 <= calculate_retry_timeout(0, {}) <= 0.5


# -- client fixtures ---------------------------------------------------------------------------


class Fake:
    """Handler script + recorded sleeps + a clock that advances one second per reading."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls = 0
        self.sleeps: list[float] = []
        self.now = 0.0

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer(request) if callable(answer) else answer

    def clock(self) -> float:
        self.now += 1.0
        return self.now

    def client(self, **settings: Any) -> HttpClient:
        s = HttpSettings(base_url="https://api.example.test/v1", api_key_env=ENV,
                         provider="testprov", **settings)
        return HttpClient(s, transport=httpx.MockTransport(self.handler),
                          sleep=self.sleeps.append, clock=self.clock)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, KEY)


OK = httpx.Response(200, json={"ok": True})


def test_retries_honour_retry_after_then_succeed():
    fake = Fake(httpx.Response(429, headers={"Retry-After": "3"}),
                httpx.Response(503, headers={"retry-after-ms": "250"}), OK)
    result = fake.client(max_retries=2).post_json("/x", {"a": 1})
    assert result.data == {"ok": True}
    assert fake.sleeps == [3.0, 0.25] and fake.calls == 3


def test_5xx_retried_then_server_error():
    fake = Fake(httpx.Response(502, json={"error": {"message": "bad gateway"}}))
    with pytest.raises(ServerError, match=r"HTTP 502.*3 attempt") as info:
        fake.client(max_retries=2).post_json("/x", {})
    assert fake.calls == 3 and len(fake.sleeps) == 2 and info.value.status == 502


@pytest.mark.parametrize("status", [408, 409])
def test_408_409_are_retried(status):
    fake = Fake(httpx.Response(status), OK)
    assert fake.client().post_json("/x", {}).data == {"ok": True}
    assert fake.calls == 2


def test_429_after_budget_is_rate_limit_error():
    fake = Fake(httpx.Response(429, json={"error": {"message": "slow down"}}))
    with pytest.raises(RateLimitError, match="slow down"):
        fake.client(max_retries=1).post_json("/x", {})
    assert fake.calls == 2


def test_connection_errors_are_retried_then_typed():
    fake = Fake(httpx.ConnectError("refused"))
    with pytest.raises(ProviderConnectionError, match="could not reach"):
        fake.client(max_retries=2).post_json("/x", {})
    assert fake.calls == 3
    fake = Fake(httpx.ReadTimeout("slow"), OK)
    assert fake.client().post_json("/x", {}).data == {"ok": True}
    with pytest.raises(ProviderTimeoutError):
        Fake(httpx.ConnectTimeout("t")).client(max_retries=0).post_json("/x", {})


def test_401_is_auth_error_not_retried_and_key_absent():
    body = {"error": {"message": f"Incorrect API key provided: {KEY}", "code": "invalid_api_key"}}
    fake = Fake(httpx.Response(401, json=body))
    with pytest.raises(AuthenticationError) as info:
        fake.client().post_json("/x", {})
    assert fake.calls == 1
    assert KEY not in str(info.value) and KEY not in repr(info.value)
    assert ENV in str(info.value)


def test_other_4xx_is_request_error():
    fake = Fake(httpx.Response(402, json={"error": {"message": "Insufficient Balance"}}))
    with pytest.raises(ProviderRequestError, match="Insufficient Balance"):
        fake.client().post_json("/x", {})
    assert fake.calls == 1


def test_missing_key_names_variable_and_sends_nothing(monkeypatch):
    monkeypatch.delenv(ENV)
    fake = Fake(OK)
    with pytest.raises(AuthenticationError, match=ENV):
        fake.client().post_json("/x", {})
    assert fake.calls == 0


def test_key_is_read_at_request_time(monkeypatch):
    seen: list[str] = []

    def answer(r: httpx.Request) -> httpx.Response:
        seen.append(r.headers["authorization"])
        return OK

    fake = Fake(answer)
    client = fake.client()
    monkeypatch.setenv(ENV, "sk-rotated-key-0000")
    client.post_json("/x", {})
    assert seen == ["Bearer sk-rotated-key-0000"]


def test_request_bytes_are_compact_utf8():
    bodies: list[bytes] = []

    def answer(r: httpx.Request) -> httpx.Response:
        bodies.append(r.content)
        return OK

    fake = Fake(answer)
    fake.client().post_json("/x", {"b": "é", "a": [1, 2]})
    assert bodies == ['{"b":"é","a":[1,2]}'.encode()]


def test_non_json_body_is_response_error():
    fake = Fake(httpx.Response(200, content=b"<html>gateway</html>"))
    with pytest.raises(ProviderResponseError, match="not JSON"):
        fake.client().post_json("/x", {})


# -- streaming ----------------------------------------------------------------------------------


def stream_of(*pieces: bytes, error: BaseException | None = None) -> httpx.Response:
    def gen() -> Iterator[bytes]:
        yield from pieces
        if error is not None:
            raise error
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=gen())


def forever(piece: bytes) -> httpx.Response:
    def gen() -> Iterator[bytes]:
        while True:
            yield piece
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=gen())


def test_keepalive_only_stream_hits_total_ceiling():
    fake = Fake(forever(b": keep-alive\n\n"))
    client = fake.client(total_timeout=5.0, idle_timeout=1000.0)
    with pytest.raises(ProviderTimeoutError, match="total-duration ceiling"), \
            client.stream_events("/s", {}) as stream:
        list(stream)


def test_keepalive_does_not_rearm_idle_timeout():
    fake = Fake(forever(b": keep-alive\n\n"))
    client = fake.client(total_timeout=10_000.0, idle_timeout=4.0)
    with pytest.raises(ProviderTimeoutError, match="only keep-alives"), \
            client.stream_events("/s", {}) as stream:
        list(stream)


def test_events_reset_the_idle_clock_and_comments_are_skipped():
    body = b": hi\n\n" + b"data: 1\n\n" * 20 + b"event: x\ndata: [DONE]\n\n"
    fake = Fake(stream_of(*[body[i:i + 5] for i in range(0, len(body), 5)]))
    client = fake.client(total_timeout=10_000.0, idle_timeout=6.0)
    with client.stream_events("/s", {}) as stream:
        events = list(stream)
    assert [e.data for e in events] == ["1"] * 20 + ["[DONE]"] and events[-1].event == "x"


def test_wrong_content_type_is_response_error():
    fake = Fake(httpx.Response(200, json={"not": "a stream"}))
    with pytest.raises(ProviderResponseError, match="event stream"), \
            fake.client().stream_events("/s", {}) as stream:
        list(stream)


# -- HttpProvider: partial messages, cancellation, secrecy --------------------------------------


class LineTranslator:
    """A fake wire format: each event's data is text; ``[DONE]`` ends the answer."""

    name = "lines"
    path = "/s"

    def build_body(self, request: ChatRequest, *, model: str) -> dict[str, Any]:
        return {"model": model, "n": len(request.messages)}

    def parse_response(self, data: Any, request_id: str) -> ChatResponse:
        return ChatResponse(message=Message(role="assistant", content=str(data["text"])))

    def new_stream(self) -> LineStream:
        return LineStream()


class LineStream:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.done = False

    def feed(self, event: Any) -> bool:
        if event.data == "[DONE]":
            self.done = True
            return True
        if event.data == "BAD":
            raise ProviderResponseError(f"bad event, provider said key {KEY}")
        self.parts.append(event.data)
        return False

    def partial(self) -> Message | None:
        return Message(role="assistant", content="".join(self.parts), partial=True) \
            if self.parts else None

    def finish(self, request_id: str) -> ChatResponse:
        if not self.done:
            raise stream_cut("lines", "[DONE]")
        return ChatResponse(message=Message(role="assistant", content="".join(self.parts)),
                            request_id=request_id)


class ClosingStream(httpx.SyncByteStream):
    def __init__(self, pieces: list[bytes], error: BaseException) -> None:
        self.pieces = pieces
        self.error = error
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield from self.pieces
        raise self.error

    def close(self) -> None:
        self.closed = True


def provider(fake: Fake, **settings: Any) -> HttpProvider:
    return HttpProvider(name="lines", translator=LineTranslator(), http=fake.client(**settings),
                        model="m", context_window=1000, cache_ttl_minutes=5)


def test_full_stream_returns_response_with_request_id():
    response = stream_of(b"data: a\n\ndata: b\n\ndata: [DONE]\n\n")
    response.headers["x-request-id"] = "req-7"
    result = provider(Fake(response)).complete(ChatRequest(messages=()))
    assert result.message.content == "ab" and result.request_id == "req-7"


def test_dropped_stream_is_connection_error_with_partial():
    fake = Fake(stream_of(b"data: a\n\ndata: b\n\n", error=httpx.ReadError("reset")))
    with pytest.raises(ProviderConnectionError, match="connection dropped") as info:
        provider(fake).complete(ChatRequest(messages=()))
    assert partial_message_of(info.value) == Message(role="assistant", content="ab",
                                                     partial=True)
    assert fake.calls == 1  # a started stream is never replayed


def test_read_timeout_mid_stream_is_timeout_error():
    fake = Fake(stream_of(b"data: a\n\n", error=httpx.ReadTimeout("idle")))
    with pytest.raises(ProviderTimeoutError) as info:
        provider(fake).complete(ChatRequest(messages=()))
    assert partial_message_of(info.value) is not None


def test_keyboard_interrupt_closes_response_and_reports_partial():
    body = ClosingStream([b"data: x\n\n", b"data: y\n\n"], KeyboardInterrupt())
    fake = Fake(httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body))
    with pytest.raises(KeyboardInterrupt) as info:
        provider(fake).complete(ChatRequest(messages=()))
    assert body.closed
    assert partial_message_of(info.value) == Message(role="assistant", content="xy",
                                                     partial=True)


def overflow_body() -> httpx.Response:
    return httpx.Response(400, json={"error": {
        "message": f"maximum context length is 100 tokens. However, you requested 150 tokens "
                   f"(120 in the messages, 30 in the completion). key={KEY}",
        "code": "invalid_request_error"}})


SCENARIOS = {
    "401": (lambda: httpx.Response(401, json={"error": {"message": f"bad key {KEY}"}}),
            AuthenticationError),
    "403": (lambda: httpx.Response(403, text=f"forbidden for {KEY}"), AuthenticationError),
    "429": (lambda: httpx.Response(429, json={"error": {"message": f"limit {KEY}"}}),
            RateLimitError),
    "500": (lambda: httpx.Response(500, text=f"oops {KEY}"), ServerError),
    "422": (lambda: httpx.Response(422, text=f"bad param {KEY}"), ProviderRequestError),
    "overflow": (overflow_body, ContextLimitError),
    "connect": (lambda: httpx.ConnectError(f"cannot connect with {KEY}"),
                ProviderConnectionError),
    "timeout": (lambda: httpx.ReadTimeout(f"timeout {KEY}"), ProviderTimeoutError),
}


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_no_error_message_contains_the_key(scenario, stream):
    make, expected = SCENARIOS[scenario]
    with pytest.raises(expected) as info:
        provider(Fake(make()), max_retries=1).complete(ChatRequest(messages=(), stream=stream))
    for text in (str(info.value), repr(info.value), json.dumps(info.value.args)):
        assert KEY not in text


@pytest.mark.parametrize(("make", "expected", "stream"), [
    (lambda: httpx.Response(200, content=f"not json {KEY}".encode()), ProviderResponseError,
     False),
    (lambda: stream_of(b"data: BAD\n\n"), ProviderResponseError, True),
    (lambda: stream_of(b"data: a\n\n", error=httpx.ReadError(f"reset {KEY}")),
     ProviderConnectionError, True),
])
def test_no_body_error_contains_the_key(make, expected, stream):
    with pytest.raises(expected) as info:
        provider(Fake(make())).complete(ChatRequest(messages=(), stream=stream))
    for text in (str(info.value), repr(info.value)):
        assert KEY not in text


def test_redact_masks_echoed_partial_keys():
    assert redact("Incorrect API key provided: sk-ab***********yz12.", None) == \
        "Incorrect API key provided: sk-***."
    assert redact(f"x {KEY} y", KEY) == "x *** y"
