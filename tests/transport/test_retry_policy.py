"""Retry policy edges (design §7.1): a ``Retry-After`` beyond the in-process cap (60 s, see
docs/api.md) fails at once and says so; a response dropped before any output is sent again,
one that delivered output never."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from tests.transport.test_client import ENV, KEY, Fake, provider, stream_of

from ctxfold import ChatRequest, Message, ProviderConnectionError, RateLimitError, ServerError
from ctxfold.transport.aclient import AsyncHttpClient
from ctxfold.transport.client import HttpSettings
from ctxfold.transport.provider import partial_message_of
from ctxfold.transport.retry import MAX_RETRY_AFTER, wait_beyond_cap

OK = httpx.Response(200, json={"ok": True})
DONE = b"data: a\n\ndata: [DONE]\n\n"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, KEY)


def dropped(*pieces: bytes) -> object:
    """A fresh streamed response that drops after ``pieces`` (a callable: one per request)."""
    return lambda _request: stream_of(*pieces, error=httpx.ReadError("connection reset"))


# -- Retry-After beyond the cap ----------------------------------------------------------------


def test_wait_beyond_cap_reads_seconds_ms_and_dates() -> None:
    assert wait_beyond_cap({"Retry-After": "120"}) == 120.0
    assert wait_beyond_cap({"retry-after-ms": "90000"}) == 90.0
    assert wait_beyond_cap({"Retry-After": str(MAX_RETRY_AFTER)}) is None
    assert wait_beyond_cap({"Retry-After": "3"}) is None and wait_beyond_cap({}) is None


@pytest.mark.parametrize("status, error", [(429, RateLimitError), (503, ServerError)])
def test_retry_after_beyond_the_cap_is_not_retried_and_says_so(status, error) -> None:
    fake = Fake(httpx.Response(status, headers={"Retry-After": "120"},
                               json={"error": {"message": f"slow down {KEY}"}}), OK)
    with pytest.raises(error, match=r"asked to wait 120s .*not retried") as info:
        fake.client(max_retries=2).post_json("/x", {})
    assert fake.calls == 1 and fake.sleeps == []  # no retry 0.4 s later that would be refused
    assert info.value.retry_after == 120.0 and info.value.status == status
    assert KEY not in str(info.value)


def test_retry_after_within_the_cap_is_still_honoured() -> None:
    fake = Fake(httpx.Response(429, headers={"Retry-After": "60"}), OK)
    assert fake.client(max_retries=1).post_json("/x", {}).data == {"ok": True}
    assert fake.sleeps == [60.0] and fake.calls == 2


def test_async_client_refuses_a_long_retry_after_too() -> None:
    fake = Fake(httpx.Response(429, headers={"Retry-After": "600"}), OK)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async def handler(request: httpx.Request) -> httpx.Response:
        return fake.handler(request)

    async def run() -> None:
        settings = HttpSettings(base_url="https://api.example.test/v1", api_key_env="X",
                                api_key="k", provider="testprov", max_retries=2)
        client = AsyncHttpClient(settings, transport=httpx.MockTransport(handler), sleep=sleep)
        try:
            await client.post_json("/x", {})
        finally:
            await client.aclose()

    with pytest.raises(RateLimitError, match="asked to wait 600s"):
        asyncio.run(run())
    assert fake.calls == 1 and slept == []


# -- a response dropped before any output --------------------------------------------------------


@pytest.mark.parametrize("pieces", [(), (b": keep-alive\n\n",)], ids=["no-bytes", "comment-only"])
def test_stream_dropped_before_any_output_is_sent_again(pieces) -> None:
    fake = Fake(dropped(*pieces), lambda _r: stream_of(DONE))
    result = provider(fake, max_retries=2).complete(ChatRequest(messages=()))
    assert result.message.content == "a"
    assert fake.calls == 2 and len(fake.sleeps) == 1


def test_stream_that_ends_early_without_output_is_sent_again() -> None:
    fake = Fake(lambda _r: stream_of(b""), lambda _r: stream_of(DONE))
    assert provider(fake).complete(ChatRequest(messages=())).message.content == "a"
    assert fake.calls == 2


def test_drops_before_output_use_the_retry_budget_then_fail_clearly() -> None:
    fake = Fake(dropped())
    with pytest.raises(ProviderConnectionError, match=r"3 attempts, each dropped before any "
                                                      r"output") as info:
        provider(fake, max_retries=2).complete(ChatRequest(messages=()))
    assert fake.calls == 3 and partial_message_of(info.value) is None


def test_a_request_with_max_retries_0_is_sent_once() -> None:
    fake = Fake(dropped(), lambda _r: stream_of(DONE))
    with pytest.raises(ProviderConnectionError):
        provider(fake).complete(ChatRequest(messages=(), max_retries=0))
    assert fake.calls == 1


def test_stream_that_delivered_output_is_never_sent_again() -> None:
    fake = Fake(dropped(b"data: half\n\n"), lambda _r: stream_of(DONE))
    with pytest.raises(ProviderConnectionError) as info:
        provider(fake, max_retries=2).complete(ChatRequest(messages=()))
    assert fake.calls == 1
    assert partial_message_of(info.value) == Message(role="assistant", content="half",
                                                     partial=True)


def test_a_failure_to_connect_is_retried_by_the_http_layer_only() -> None:
    fake = Fake(httpx.ConnectError("refused"))
    with pytest.raises(ProviderConnectionError, match="could not reach"):
        provider(fake, max_retries=2).complete(ChatRequest(messages=()))
    assert fake.calls == 3  # not 3 × 3: connecting is not a dropped response
