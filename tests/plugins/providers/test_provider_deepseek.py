"""The ``deepseek`` provider: exact request JSON, stream assembly, usage placements, errors."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest
from providers_support import SECRET, Recorder, sse_response

from ctxfold import (
    ChatRequest,
    ContextLimitError,
    HttpProvider,
    Message,
    Provider,
    ProviderConnectionError,
    ProviderResponseError,
    ToolCall,
    ToolSchema,
)
from ctxfold.kernel.config import ProviderConfig
from ctxfold.transport.provider import partial_message_of

USAGE = {
    "prompt_tokens": 1200, "completion_tokens": 40, "total_tokens": 1240,
    "prompt_tokens_details": {"cached_tokens": 1024},
    "prompt_cache_hit_tokens": 1024, "prompt_cache_miss_tokens": 176,
    "completion_tokens_details": {"reasoning_tokens": 12},
}

HISTORY = (
    Message(role="system", content="You are terse."),
    Message(role="user", content="list files"),
    Message(role="assistant", content="", reasoning_content="need ls",
            tool_calls=(ToolCall(id="call_00_a", name="sh", arguments='{"cmd":"ls"}'),)),
    Message(role="tool", content="a.py\nb.py", raw_content="a.py\nb.py", tool_call_id="call_00_a"),
    Message(role="assistant", content="Two files.", reasoning_content="count them"),
    Message(role="user", content="thanks", local_only=True),
    Message(role="user", content="and now?"),
)
TOOL = ToolSchema(name="sh", description="run", parameters={"type": "object"})


def chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None,
          choices: bool = True) -> dict:
    out: dict = {"id": "c1", "object": "chat.completion.chunk", "model": "deepseek-flash"}
    out["choices"] = ([{"index": 0, "delta": delta or {}, "finish_reason": finish}]
                      if choices else [])
    out["usage"] = usage
    return out


def text_stream(usage_on_finish: bool = True) -> httpx.Response:
    events = [
        ": keep-alive\n\n",
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": ""}),
        chunk({"reasoning_content": "think"}),
        ": keep-alive\n\n",
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({"role": None, "content": ""}, "stop", USAGE if usage_on_finish else None),
    ]
    if not usage_on_finish:
        events.append(chunk(usage=USAGE, choices=False))
    return sse_response(events)


def test_request_json_exact(make_provider):
    rec = Recorder(text_stream())
    provider = make_provider("deepseek", rec)
    provider.complete(ChatRequest(messages=HISTORY, tools=(TOOL,), effort="high"))
    assert rec.requests[0].url == "https://api.deepseek.com/chat/completions"
    assert rec.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert rec.body() == {
        "model": "m-1",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "list files"},
            {"role": "assistant", "content": "", "reasoning_content": "need ls",
             "tool_calls": [{"id": "call_00_a", "type": "function",
                             "function": {"name": "sh", "arguments": '{"cmd":"ls"}'}}]},
            {"role": "tool", "content": "a.py\nb.py", "tool_call_id": "call_00_a"},
            {"role": "assistant", "content": "Two files."},
            {"role": "user", "content": "and now?"},
        ],
        "tools": [{"type": "function", "function": {"name": "sh", "description": "run",
                                                    "parameters": {"type": "object"}}}],
        "reasoning_effort": "high",
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert "max_tokens" not in rec.body()


@pytest.mark.parametrize(("effort", "fields"), [
    ("none", {"thinking": {"type": "disabled"}}),
    ("low", {"reasoning_effort": "low"}),
    ("medium", {"reasoning_effort": "high"}),
    ("max", {"reasoning_effort": "max"}),
])
def test_effort_and_max_tokens(make_provider, effort, fields):
    rec = Recorder(text_stream())
    provider = make_provider("deepseek", rec)
    provider.complete(ChatRequest(messages=HISTORY[:2], effort=effort, max_output_tokens=4096))
    body = rec.body()
    assert body["max_tokens"] == 4096
    for key in ("thinking", "reasoning_effort"):
        assert body.get(key) == fields.get(key)


def test_byte_prefix_is_stable_between_turns(make_provider):
    provider = make_provider("deepseek", Recorder(text_stream()))
    one = provider.serialize(ChatRequest(messages=HISTORY[:4], tools=(TOOL,)))
    two = provider.serialize(ChatRequest(messages=HISTORY, tools=(TOOL,)))
    cut = one.index(b"]", one.index(b'"tool_call_id":"call_00_a"'))  # end of turn-n messages
    assert two.startswith(one[:cut])


@pytest.mark.parametrize("usage_on_finish", [True, False])
def test_stream_assembly_and_usage_placements(make_provider, usage_on_finish):
    provider = make_provider("deepseek", Recorder(text_stream(usage_on_finish)))
    response = provider.complete(ChatRequest(messages=HISTORY[:2]))
    assert response.message.content == "Hello"
    assert response.message.reasoning_content == "think"
    assert response.message.partial is False
    assert response.finish_reason == "stop"
    usage = response.usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (1200, 40)
    # hit counted once although cached_tokens duplicates it
    assert (usage.cache_hit_tokens, usage.cache_miss_tokens, usage.reasoning_tokens) == (
        1024, 176, 12)


def test_tool_call_fragments_keyed_by_index(make_provider):
    events = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"tool_calls": [{"index": 0, "id": "call_00_x", "type": "function",
                               "function": {"name": "sh", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_01_y", "type": "function",
                               "function": {"name": "read", "arguments": '{"pa'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"cmd"'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ':"ls"}'}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": 'th":"a"}'}}]}),
        chunk({}, "tool_calls", USAGE),
    ]
    provider = make_provider("deepseek", Recorder(sse_response(events)))
    response = provider.complete(ChatRequest(messages=HISTORY[:2]))
    assert response.finish_reason == "tool_calls"
    assert response.message.tool_calls == (
        ToolCall(id="call_00_x", name="sh", arguments='{"cmd":"ls"}'),
        ToolCall(id="call_01_y", name="read", arguments='{"path":"a"}'),
    )
    assert json.loads(response.message.tool_calls[0].arguments) == {"cmd": "ls"}


def test_non_streaming_response_with_keepalive_lines(make_provider):
    body = {"id": "r1", "choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": "ok", "reasoning_content": "hm"}}], "usage": USAGE}
    raw = b"\n\n\n" + json.dumps(body).encode()  # DeepSeek sends blank lines while waiting
    rec = Recorder(httpx.Response(200, content=raw,
                                  headers={"content-type": "application/json"}))
    provider = make_provider("deepseek", rec)
    response = provider.complete(ChatRequest(messages=HISTORY[:2], stream=False))
    assert "stream_options" not in rec.body() and rec.body()["stream"] is False
    assert response.message.content == "ok" and response.message.reasoning_content == "hm"
    assert response.usage.cache_hit_tokens == 1024 and response.request_id == "r1"


def test_overflow_400_becomes_context_limit_error(make_provider):
    body = {"error": {"message": "This model's maximum context length is 1048576 tokens. "
                      "However, you requested 1293247 tokens (900031 in the messages, 393216 in "
                      "the completion). Please reduce the length of the messages or completion.",
                      "type": "invalid_request_error", "param": None,
                      "code": "invalid_request_error"}}
    rec = Recorder(httpx.Response(400, json=body))
    provider = make_provider("deepseek", rec)
    with pytest.raises(ContextLimitError) as info:
        provider.complete(ChatRequest(messages=HISTORY[:2]))
    exc = info.value
    assert (exc.window, exc.prompt, exc.completion) == (1_048_576, 900_031, 393_216)
    assert len(rec.requests) == 1  # overflow is never retried by the HTTP layer


def test_malformed_chunk_is_response_error_with_partial(make_provider):
    events = [chunk({"content": "par"}), "data: {not json\n\n"]
    provider = make_provider("deepseek", Recorder(sse_response(events)))
    with pytest.raises(ProviderResponseError) as info:
        provider.complete(ChatRequest(messages=HISTORY[:2]))
    assert partial_message_of(info.value) == Message(role="assistant", content="par",
                                                     partial=True)


def test_stream_ending_without_finish_is_connection_error(make_provider):
    events = [chunk({"content": "half"})]
    provider = make_provider("deepseek", Recorder(sse_response(events, done=False)))
    with pytest.raises(ProviderConnectionError) as info:
        provider.complete(ChatRequest(messages=HISTORY[:2]))
    partial = partial_message_of(info.value)
    assert partial is not None and partial.partial and partial.content == "half"


def test_factory_settings_and_protocol(make_provider):
    provider = make_provider("deepseek", Recorder(text_stream()),
                             provider=ProviderConfig(name="deepseek", model="",
                                                     base_url="http://127.0.0.1:9/v1",
                                                     context_window=65_536))
    assert isinstance(provider, Provider) and isinstance(provider, HttpProvider)
    assert provider.cache_ttl_minutes == 1440 and provider.model == "deepseek-flash"
    assert provider.context_window == 65_536
    assert provider.http.url_for("/chat/completions") == "http://127.0.0.1:9/v1/chat/completions"
    ttl = make_provider("deepseek", Recorder(text_stream()),
                        provider=ProviderConfig(name="deepseek", cache_ttl_minutes=30))
    assert ttl.cache_ttl_minutes == 30


def test_plugin_import_does_not_load_httpx():
    code = ("import sys, ctxfold.plugins.providers.deepseek, ctxfold.plugins.providers.mimo, "
            "ctxfold.plugins.providers.responses; print('httpx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
