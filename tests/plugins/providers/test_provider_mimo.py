"""The ``mimo`` provider: output ladder, thinking switch, usage after the finish chunk."""

from __future__ import annotations

import httpx
import pytest
from providers_support import Recorder, sse_response

from ctxfold import ChatRequest, ContextLimitError, Message, ProviderRequestError, ToolCall

MESSAGES = (
    Message(role="user", content="hi"),
    Message(role="assistant", content="", reasoning_content="plan",
            tool_calls=(ToolCall(id="call_1", name="sh", arguments="{}"),)),
    Message(role="tool", content="ok", tool_call_id="call_1"),
    Message(role="assistant", content="done", reasoning_content="not replayed"),
    Message(role="user", content="next"),
)


def chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None,
          choices: bool = True) -> dict:
    return {"id": "m1", "choices": [{"index": 0, "delta": delta or {},
                                     "finish_reason": finish}] if choices else [],
            "usage": usage}


def stream(usage: dict | None) -> httpx.Response:
    return sse_response([
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "r"}),
        chunk({"content": "answer"}),
        chunk({}, "stop"),
        # MiMo: usage after the finish chunk, before [DONE]
        chunk(usage=usage, choices=False),
    ])


@pytest.mark.parametrize(("effort", "explicit", "expected", "thinking"), [
    ("none", 0, 16_384, "disabled"),
    ("low", 0, 32_768, "enabled"),
    ("medium", 0, 32_768, "enabled"),
    ("high", 0, 65_536, "enabled"),
    ("max", 0, 65_536, "enabled"),
    ("high", 2048, 2048, "enabled"),
    ("none", 100_000, 100_000, "disabled"),
])
def test_ladder_and_thinking(make_provider, effort, explicit, expected, thinking):
    rec = Recorder(stream(None))
    provider = make_provider("mimo", rec)
    provider.complete(ChatRequest(messages=MESSAGES[:1], effort=effort,
                                  max_output_tokens=explicit))
    body = rec.body()
    assert body["max_completion_tokens"] == expected
    assert body["thinking"] == {"type": thinking}
    assert "max_tokens" not in body and "reasoning_effort" not in body


def test_request_json_and_reasoning_replay(make_provider):
    rec = Recorder(stream(None))
    provider = make_provider("mimo", rec)
    provider.complete(ChatRequest(messages=MESSAGES))
    assert rec.requests[0].url == "https://api.xiaomimimo.com/v1/chat/completions"
    assert rec.body()["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "reasoning_content": "plan",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "sh", "arguments": "{}"}}]},
        {"role": "tool", "content": "ok", "tool_call_id": "call_1"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "next"},
    ]
    assert rec.body()["stream_options"] == {"include_usage": True}


def test_usage_after_finish_chunk(make_provider):
    usage = {"prompt_tokens": 500, "completion_tokens": 9, "total_tokens": 509,
             "prompt_tokens_details": {"cached_tokens": 192},
             "completion_tokens_details": {"reasoning_tokens": 3}}
    provider = make_provider("mimo", Recorder(stream(usage)))
    response = provider.complete(ChatRequest(messages=MESSAGES[:1]))
    assert response.message.content == "answer" and response.finish_reason == "stop"
    u = response.usage
    assert (u.prompt_tokens, u.completion_tokens, u.cache_hit_tokens, u.cache_miss_tokens,
            u.reasoning_tokens) == (500, 9, 192, 308, 3)


def test_null_prompt_tokens_details(make_provider):
    usage = {"prompt_tokens": 50, "completion_tokens": 2, "prompt_tokens_details": None}
    provider = make_provider("mimo", Recorder(stream(usage)))
    u = provider.complete(ChatRequest(messages=MESSAGES[:1])).usage
    assert (u.cache_hit_tokens, u.cache_miss_tokens) == (0, 50)


def test_error_inside_200_stream(make_provider):
    events = [chunk({"content": "x"}),
              {"error": {"message": "Param Incorrect", "param": "messages", "code": "400"}}]
    provider = make_provider("mimo", Recorder(sse_response(events)))
    with pytest.raises(ProviderRequestError, match="Param Incorrect"):
        provider.complete(ChatRequest(messages=MESSAGES[:1]))


def test_generic_400_overflow_parsed(make_provider):
    body = {"error": {"message": "prompt is too long: 300000 tokens > 262144 maximum",
                      "code": "400"}}
    provider = make_provider("mimo", Recorder(httpx.Response(400, json=body)))
    with pytest.raises(ContextLimitError) as info:
        provider.complete(ChatRequest(messages=MESSAGES[:1]))
    assert (info.value.window, info.value.prompt) == (262_144, 300_000)


def test_param_incorrect_400_is_request_error_not_retried(make_provider):
    body = {"code": "400", "message": "Param Incorrect", "param": "text is not set", "type": ""}
    rec = Recorder(httpx.Response(400, json=body))
    provider = make_provider("mimo", rec)
    with pytest.raises(ProviderRequestError, match="Param Incorrect") as info:
        provider.complete(ChatRequest(messages=MESSAGES[:1]))
    assert info.value.status == 400 and len(rec.requests) == 1
