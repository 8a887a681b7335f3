"""Streaming for real: chunks reach the client as the upstream sends them, and a stream that
breaks midway reaches the client as an error while nothing of it enters the transcript."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import APIError, OpenAI

import ctxfold
from ctxfold import Config, ProviderOptions
from ctxfold.kernel.config import EstimatorConfig, ProviderConfig, StoreConfig
from ctxfold.serve import ProxyServer, ServeSettings, build_proxy

PAUSE = 0.6


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    data = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


class Upstream:
    """A chat upstream (an httpx mock transport, no socket) that streams with pauses, or
    breaks after the first words."""

    def __init__(self) -> None:
        self.break_midway = False

    async def body(self) -> AsyncIterator[bytes]:
        yield chunk({"role": "assistant", "content": ""})
        yield chunk({"content": "Hello"})
        await asyncio.sleep(PAUSE)
        if self.break_midway:
            raise httpx.ReadError("the upstream connection was reset")
        yield chunk({"content": " world"})
        await asyncio.sleep(PAUSE)
        yield chunk({}, "stop")
        usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
        yield b"data: " + json.dumps({"id": "x", "object": "chat.completion.chunk",
                                      "choices": [], "usage": usage}).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"

    async def handle(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              content=self.body())


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[ProxyServer, Upstream, Config]]:
    upstream = Upstream()
    config = Config(provider=ProviderConfig(name="deepseek", api_key_env=""),
                    estimator=EstimatorConfig(name="heuristic"),
                    store=StoreConfig(path=str(tmp_path / "sessions")))
    provider = ctxfold.create_provider(config, options=ProviderOptions(
        base_url="http://127.0.0.1:9", api_key="upstream-key", max_retries=0,
        async_transport=httpx.MockTransport(upstream.handle)))
    server = ProxyServer(build_proxy(config, provider=provider,
                                     settings=ServeSettings(port=0))).start()
    try:
        yield server, upstream, config
    finally:
        server.stop()


def test_chunks_are_forwarded_as_they_arrive(proxied) -> None:
    server, _upstream, _config = proxied
    client = OpenAI(base_url=server.base_url + "/v1", api_key="k", max_retries=0)
    started = time.perf_counter()
    arrivals = []
    for event in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True):
        for choice in event.choices:
            if choice.delta.content:
                arrivals.append((choice.delta.content, time.perf_counter() - started))
    assert [text for text, _ in arrivals] == ["Hello", " world"]
    # "Hello" came before the upstream's first pause ended, not with the whole answer.
    assert arrivals[0][1] < PAUSE * 0.8
    assert arrivals[1][1] - arrivals[0][1] >= PAUSE * 0.8


def test_a_stream_that_breaks_midway_is_an_error_and_leaves_no_trace(proxied) -> None:
    server, upstream, config = proxied
    upstream.break_midway = True
    client = OpenAI(base_url=server.base_url + "/v1", api_key="k", max_retries=0,
                    default_headers={"X-Ctxfold-Session": "broken"})
    seen = []
    with pytest.raises(APIError):
        for event in client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True):
            seen += [c.delta.content for c in event.choices if c.delta.content]
    assert seen == ["Hello"]  # forwarded before the break, as it arrived
    cm = ctxfold.open_session("broken", config=config, create=False,
                              summarize=lambda _request: "")
    assert [m.role for m in cm.canonical] == ["user"]  # nothing half-received was kept
