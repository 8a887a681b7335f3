"""Each wire format over real TCP on 127.0.0.1: bodies, streams, usage placement, caching."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from ctxfold import Emulator, ReplySpec, ToolCall

SYSTEM = "You are a careful coding agent. " * 20
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command",
          "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]


def sse_data(response: httpx.Response) -> list[Any]:
    """The JSON payloads of ``data:`` lines (``[DONE]`` kept as a string)."""
    out: list[Any] = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            payload = line[len("data: "):]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def chat(client: httpx.Client, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
    return client.post("/chat/completions", json={"model": "m", "messages": messages, **extra})


@pytest.fixture
def deepseek(chars, clock):
    with Emulator("deepseek", counter=chars, clock=clock) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        yield emu, client


def test_deepseek_non_streaming_usage(deepseek) -> None:
    emu, client = deepseek
    r = chat(client, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}])
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "OK."}
    usage = body["usage"]
    assert set(usage) == {"prompt_tokens", "completion_tokens", "total_tokens",
                          "prompt_tokens_details", "prompt_cache_hit_tokens",
                          "prompt_cache_miss_tokens", "completion_tokens_details"}
    assert usage["prompt_cache_hit_tokens"] == 0
    assert usage["prompt_cache_miss_tokens"] == usage["prompt_tokens"] > 0
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}
    assert len(emu.requests) == 1 and emu.requests[0].usage == usage


def test_append_only_session_hits_on_every_request_after_the_first(deepseek) -> None:
    emu, client = deepseek
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": "task " * 40}]
    previous: dict[str, Any] | None = None
    for turn in range(6):
        r = chat(client, messages, tools=TOOLS)
        usage = r.json()["usage"]
        assert usage["prompt_cache_hit_tokens"] + usage["prompt_cache_miss_tokens"] \
            == usage["prompt_tokens"]
        if previous is None:
            assert usage["prompt_cache_hit_tokens"] == 0
        else:
            replayed = previous["prompt_tokens"] + previous["completion_tokens"]
            assert usage["prompt_cache_hit_tokens"] == replayed // 64 * 64 > 0
        previous = usage
        messages.append(r.json()["choices"][0]["message"])
        messages.append({"role": "user", "content": f"turn {turn} " * 30})
    assert len(emu.requests) == 6


def test_changed_middle_message_misses_from_that_point(deepseek) -> None:
    emu, client = deepseek
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": "first " * 50}]
    ends = []
    for turn in range(4):
        r = chat(client, messages)
        ends.append(r.json()["usage"]["prompt_tokens"])
        messages.append(r.json()["choices"][0]["message"])
        messages.append({"role": "user", "content": f"more {turn} " * 50})
    # edit message 3 (the second user message): everything from it on must miss
    edited = [*messages[:3], {"role": "user", "content": "EDITED " * 50}, *messages[4:]]
    usage = chat(client, edited).json()["usage"]
    # the longest persisted prefix before the edit is request 1's input + output
    first_total = ends[0] + emu.requests[0].completion_tokens
    assert usage["prompt_cache_hit_tokens"] == first_total // 64 * 64
    assert usage["prompt_cache_miss_tokens"] > usage["prompt_tokens"] - ends[1]


def test_deepseek_stream_usage_on_last_chunk(deepseek) -> None:
    _emu, client = deepseek
    messages = [{"role": "user", "content": "stream please"}]
    for include in (True, False):
        body = {"model": "m", "messages": messages, "stream": True}
        if include:
            body["stream_options"] = {"include_usage": True}
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            events = sse_data(r)
        assert events[-1] == "[DONE]"
        chunks = events[:-1]
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        last = chunks[-1]
        assert last["choices"][0]["finish_reason"] == "stop"
        assert last["usage"]["prompt_tokens"] > 0
        for chunk in chunks[:-1]:
            assert chunk["choices"][0]["finish_reason"] is None
            if include:
                assert chunk["usage"] is None
            else:
                assert "usage" not in chunk
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        assert text == "OK."


def test_deepseek_stream_options_without_stream_is_400(deepseek) -> None:
    _emu, client = deepseek
    r = chat(client, [{"role": "user", "content": "x"}], stream_options={"include_usage": True})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_streamed_tool_calls_and_reasoning(chars, clock) -> None:
    reply = ReplySpec(text="", reasoning="think hard",
                      tool_calls=(ToolCall(id="call_00_x", name="bash",
                                           arguments='{"command": "ls -la /tmp"}'),))
    with Emulator("deepseek", counter=chars, clock=clock, script=[reply, reply]) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        with client.stream("POST", "/chat/completions", json={
                "messages": [{"role": "user", "content": "go"}], "stream": True}) as r:
            chunks = sse_data(r)[:-1]
        deltas = [c["choices"][0]["delta"] for c in chunks]
        assert "".join(d.get("reasoning_content") or "" for d in deltas) == "think hard"
        calls = [tc for d in deltas for tc in d.get("tool_calls") or ()]
        assert calls[0]["id"] == "call_00_x" and calls[0]["function"]["name"] == "bash"
        assert "".join(tc["function"]["arguments"] for tc in calls) \
            == '{"command": "ls -la /tmp"}'
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
        usage = chunks[-1]["usage"]
        assert usage["completion_tokens_details"]["reasoning_tokens"] == len("think hard")
        body = chat(client, [{"role": "user", "content": "go"}]).json()
        message = body["choices"][0]["message"]
        assert message["reasoning_content"] == "think hard"
        assert message["tool_calls"][0]["function"]["arguments"] == '{"command": "ls -la /tmp"}'


def test_mimo_usage_shape_and_placement(chars, clock) -> None:
    with Emulator("mimo", counter=chars, clock=clock) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}]
        first = chat(client, messages).json()["usage"]
        assert first["prompt_tokens_details"] is None  # nothing cached: null, as documented
        assert "prompt_cache_hit_tokens" not in first
        messages += [{"role": "assistant", "content": "OK."}, {"role": "user", "content": "more"}]
        with client.stream("POST", "/v1/chat/completions",
                           json={"messages": messages, "stream": True}) as r:
            events = sse_data(r)
        assert events[-1] == "[DONE]"
        finish, usage_chunk = events[-3], events[-2]
        assert finish["choices"][0]["finish_reason"] == "stop"
        assert finish.get("usage") is None
        assert usage_chunk["choices"] == []
        cached = usage_chunk["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached == (first["prompt_tokens"] + first["completion_tokens"]) // 64 * 64 > 0
        assert emu.requests[1].cache_hit_tokens == cached


def responses_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-5.5", "instructions": SYSTEM,
            "input": [{"type": "message", "role": "user", "content": text}], **extra}


def test_responses_non_streaming_and_1024_128_rule(chars, clock) -> None:
    with Emulator("responses", counter=chars, clock=clock) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        small = client.post("/responses", json=responses_body("short"))
        assert small.status_code == 200
        resp = small.json()
        assert resp["object"] == "response" and resp["status"] == "completed"
        assert resp["output"][0]["content"][0]["text"] == "OK."
        again = client.post("/v1/responses", json=responses_body("short")).json()
        assert again["usage"]["input_tokens"] < 1024
        assert again["usage"]["input_tokens_details"] == {"cached_tokens": 0}
        long_text = "x" * 3000
        first = client.post("/responses", json=responses_body(long_text)).json()["usage"]
        assert first["input_tokens_details"]["cached_tokens"] == 0
        second = client.post("/responses", json=responses_body(long_text + " and more")).json()
        shared = first["input_tokens"] - len("<｜Assistant｜>")
        assert second["usage"]["input_tokens_details"]["cached_tokens"] == shared // 128 * 128
        assert len(emu.requests) == 4


def test_responses_prompt_cache_key_scoping(chars, clock) -> None:
    with Emulator("responses", counter=chars, clock=clock) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        text = "y" * 4000
        client.post("/responses", json=responses_body(text, prompt_cache_key="a"))
        other = client.post("/responses", json=responses_body(text, prompt_cache_key="b"))
        assert other.json()["usage"]["input_tokens_details"]["cached_tokens"] == 0
        same = client.post("/responses", json=responses_body(text, prompt_cache_key="a"))
        assert same.json()["usage"]["input_tokens_details"]["cached_tokens"] >= 4000
        # no key: scoped by the first 256 tokens, so the same prefix shares a bucket
        client.post("/responses", json=responses_body(text))
        keyless = client.post("/responses", json=responses_body(text + "!"))
        assert keyless.json()["usage"]["input_tokens_details"]["cached_tokens"] >= 4000
        assert emu.requests[-1].cache_hit_tokens >= 4000


def test_responses_stream_usage_in_completed_event(chars, clock) -> None:
    reply = ReplySpec(text="done here", tool_calls=(ToolCall(id="c1", name="bash",
                                                             arguments='{"a":1}'),))
    with Emulator("responses", counter=chars, clock=clock, script=[reply]) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        with client.stream("POST", "/responses", json=responses_body("go", stream=True)) as r:
            lines = list(r.iter_lines())
        kinds = [line[len("event: "):] for line in lines if line.startswith("event: ")]
        data = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
        assert "[DONE]" not in "".join(lines)
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert [d["sequence_number"] for d in data] == list(range(len(data)))
        assert all(d["response"]["usage"] is None for d in data[:2])
        usage = data[-1]["response"]["usage"]
        assert usage["input_tokens"] == emu.requests[0].prompt_tokens
        assert set(usage) == {"input_tokens", "input_tokens_details", "output_tokens",
                              "output_tokens_details", "total_tokens"}
        text = "".join(d["delta"] for d in data if d["type"] == "response.output_text.delta")
        assert text == "done here"
        call = data[-1]["response"]["output"][-1]
        assert call["type"] == "function_call" and call["call_id"] == "c1"


def test_ttl_expiry_with_injected_clock(chars, clock) -> None:
    with Emulator("deepseek", counter=chars, clock=clock) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "a"}]
        chat(client, messages)
        clock.advance(23 * 3600)
        assert chat(client, messages).json()["usage"]["prompt_cache_hit_tokens"] > 0
        clock.advance(24 * 3600 + 1)
        assert chat(client, messages).json()["usage"]["prompt_cache_hit_tokens"] == 0
        emu.reset_cache()
        assert chat(client, messages).json()["usage"]["prompt_cache_hit_tokens"] == 0


def test_unknown_path_and_bad_body(deepseek) -> None:
    _emu, client = deepseek
    r = client.post("/responses", json={"input": "x"})
    assert r.status_code == 404 and "/chat/completions" in r.json()["error"]["message"]
    r = client.post("/chat/completions", content=b"not json")
    assert r.status_code == 400
    r = client.post("/chat/completions", json={"messages": []})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"


def test_responses_ttl_is_ten_minutes(chars, clock) -> None:
    with Emulator("responses", counter=chars, clock=clock) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        body = responses_body("w" * 2000, prompt_cache_key="s")
        client.post("/responses", json=body)
        clock.advance(599)
        assert client.post("/responses", json=body).json()["usage"][
            "input_tokens_details"]["cached_tokens"] > 1024
        clock.advance(601)
        assert client.post("/responses", json=body).json()["usage"][
            "input_tokens_details"]["cached_tokens"] == 0
        assert emu.profile.cache_ttl == 600.0
