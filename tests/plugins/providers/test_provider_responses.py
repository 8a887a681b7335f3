"""The ``responses`` provider: input items, prompt_cache_key, events, usage, overflow."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from providers_support import Recorder, sse_response

from ctxfold import (
    ChatRequest,
    ContextLimitError,
    Message,
    ProviderConnectionError,
    ServerError,
    ToolCall,
    ToolSchema,
)
from ctxfold.interop.responses import input_items
from ctxfold.transport.provider import partial_message_of

MESSAGES = (
    Message(role="system", content="Be brief."),
    Message(role="user", content="read a"),
    Message(role="assistant", content="Reading.", reasoning_content="private",
            tool_calls=(ToolCall(id="call_a", name="read", arguments='{"p":"a"}'),
                        ToolCall(id="call_b", name="read", arguments='{"p":"b"}'))),
    Message(role="tool", content="A", tool_call_id="call_a"),
    Message(role="tool", content="B", tool_call_id="call_b"),
    Message(role="assistant", content="", tool_calls=(ToolCall(id="call_c", name="ls"),)),
    Message(role="tool", content="[]", tool_call_id="call_c"),
    Message(role="user", content="note", local_only=True),
)
TOOL = ToolSchema(name="read", description="read a file",
                  parameters={"type": "object", "properties": {"p": {"type": "string"}}})
USAGE = {"input_tokens": 2000, "input_tokens_details": {"cached_tokens": 1536},
         "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 10},
         "total_tokens": 2030}


def ev(kind: str, **fields: Any) -> tuple[str, dict]:
    return kind, {"type": kind, **fields}


def completed(status: str = "completed", **extra: Any) -> tuple[str, dict]:
    return ev(f"response.{status}", response={"id": "resp_1", "status": status,
                                               "usage": USAGE, **extra})


def test_request_json_exact(make_provider):
    rec = Recorder(sse_response([completed()], done=False))
    provider = make_provider("responses", rec)
    provider.complete(ChatRequest(messages=MESSAGES, tools=(TOOL,), effort="low",
                                  cache_key="ws|main|m-1"))
    assert rec.requests[0].url == "https://api.openai.com/v1/responses"
    assert rec.body() == {
        "model": "m-1",
        "input": [
            {"type": "message", "role": "system", "content": "Be brief."},
            {"type": "message", "role": "user", "content": "read a"},
            {"type": "message", "role": "assistant", "content": "Reading."},
            {"type": "function_call", "call_id": "call_a", "name": "read",
             "arguments": '{"p":"a"}'},
            {"type": "function_call", "call_id": "call_b", "name": "read",
             "arguments": '{"p":"b"}'},
            {"type": "function_call_output", "call_id": "call_a", "output": "A"},
            {"type": "function_call_output", "call_id": "call_b", "output": "B"},
            {"type": "function_call", "call_id": "call_c", "name": "ls", "arguments": ""},
            {"type": "function_call_output", "call_id": "call_c", "output": "[]"},
        ],
        "tools": [{"type": "function", "name": "read", "description": "read a file",
                   "parameters": {"type": "object", "properties": {"p": {"type": "string"}}}}],
        "max_output_tokens": 32_768,
        "reasoning": {"effort": "low"},
        "store": False,
        "prompt_cache_key": "ws|main|m-1",
        "stream": True,
    }


@pytest.mark.parametrize(("effort", "explicit", "expected"), [
    ("none", 0, 16_384), ("medium", 0, 32_768), ("high", 0, 65_536), ("max", 0, 65_536),
    ("high", 777, 777)])
def test_output_ladder(make_provider, effort, explicit, expected):
    rec = Recorder(sse_response([completed()], done=False))
    make_provider("responses", rec).complete(
        ChatRequest(messages=MESSAGES[:2], effort=effort, max_output_tokens=explicit))
    assert rec.body()["max_output_tokens"] == expected
    assert rec.body()["reasoning"] == {"effort": effort}
    assert "prompt_cache_key" not in rec.body()


def test_stream_text_tool_calls_and_usage(make_provider):
    events = [
        ": keep-alive\n\n",
        ev("response.created", response={"id": "resp_1", "status": "in_progress"}),
        ev("response.reasoning_summary_text.delta", output_index=0, delta="why"),
        ev("response.output_item.added", output_index=1,
           item={"type": "message", "id": "msg_1", "role": "assistant", "content": []}),
        ev("response.output_text.delta", item_id="msg_1", output_index=1, delta="Hi "),
        ev("response.output_text.delta", item_id="msg_1", output_index=1, delta="there",
           obfuscation="xyz"),
        ev("response.output_item.added", output_index=2,
           item={"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "read",
                 "arguments": ""}),
        ev("response.function_call_arguments.delta", item_id="fc_1", output_index=2,
           delta='{"p":'),
        ev("response.function_call_arguments.delta", item_id="fc_1", output_index=2,
           delta='"x"}'),
        ev("response.output_item.done", output_index=2,
           item={"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "read",
                 "arguments": '{"p":"x"}'}),
        completed(),
    ]
    provider = make_provider("responses", Recorder(sse_response(events, done=False)))
    response = provider.complete(ChatRequest(messages=MESSAGES[:2]))
    assert response.message.content == "Hi there"
    assert response.message.reasoning_content == "why"
    assert response.message.tool_calls == (ToolCall(id="call_9", name="read",
                                                    arguments='{"p":"x"}'),)
    assert response.finish_reason == "tool_calls" and response.request_id == "resp_1"
    u = response.usage
    assert (u.prompt_tokens, u.completion_tokens, u.cache_hit_tokens, u.cache_miss_tokens,
            u.reasoning_tokens) == (2000, 30, 1536, 464, 10)


def test_incomplete_is_length(make_provider):
    events = [ev("response.output_text.delta", output_index=0, delta="cut"),
              completed("incomplete", incomplete_details={"reason": "max_output_tokens"})]
    provider = make_provider("responses", Recorder(sse_response(events)))  # [DONE] tolerated
    response = provider.complete(ChatRequest(messages=MESSAGES[:2]))
    assert response.finish_reason == "length" and response.message.content == "cut"


def test_in_stream_overflow_error_event(make_provider):
    events = [ev("response.created", response={"id": "r"}),
              ("error", {"type": "error", "sequence_number": 2, "error": {
                  "type": "invalid_request_error", "code": "context_length_exceeded",
                  "message": "Your input exceeds the context window of this model. "
                             "Please adjust your input and try again.", "param": "input"}})]
    provider = make_provider("responses", Recorder(sse_response(events, done=False)))
    with pytest.raises(ContextLimitError) as info:
        provider.complete(ChatRequest(messages=MESSAGES[:2]))
    assert (info.value.window, info.value.prompt, info.value.completion) == (0, 0, 0)


def test_http_400_overflow(make_provider):
    body = {"error": {"type": "invalid_request_error", "code": "context_length_exceeded",
                      "message": "Your input exceeds the context window of this model. "
                                 "Please adjust your input and try again.", "param": "input"}}
    provider = make_provider("responses", Recorder(httpx.Response(400, json=body)))
    with pytest.raises(ContextLimitError):
        provider.complete(ChatRequest(messages=MESSAGES[:2]))


def test_response_failed_event_is_typed(make_provider):
    events = [ev("response.output_text.delta", output_index=0, delta="par"),
              ev("response.failed", response={"id": "r", "status": "failed", "error": {
                  "code": "server_error", "message": "boom"}})]
    provider = make_provider("responses", Recorder(sse_response(events, done=False)))
    with pytest.raises(ServerError, match="boom") as info:
        provider.complete(ChatRequest(messages=MESSAGES[:2]))
    assert partial_message_of(info.value) == Message(role="assistant", content="par",
                                                     partial=True)


def test_stream_without_terminal_event_is_cut(make_provider):
    events = [ev("response.output_text.delta", output_index=0, delta="so far")]
    provider = make_provider("responses", Recorder(sse_response(events, done=False)))
    with pytest.raises(ProviderConnectionError) as info:
        provider.complete(ChatRequest(messages=MESSAGES[:2]))
    partial = partial_message_of(info.value)
    assert partial is not None and partial.content == "so far" and partial.partial


def test_non_streaming_response(make_provider):
    body = {"id": "resp_2", "status": "completed", "usage": USAGE, "output": [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}]},
        {"type": "message", "id": "m", "role": "assistant",
         "content": [{"type": "output_text", "text": "Done.", "annotations": []}]},
        {"type": "function_call", "id": "fc", "call_id": "call_z", "name": "ls",
         "arguments": "{}"},
    ]}
    rec = Recorder(httpx.Response(200, json=body))
    response = make_provider("responses", rec).complete(
        ChatRequest(messages=MESSAGES[:2], stream=False))
    assert rec.body()["stream"] is False
    assert response.message.content == "Done." and response.message.reasoning_content == "s"
    assert response.message.tool_calls == (ToolCall(id="call_z", name="ls", arguments="{}"),)
    assert response.usage.cache_hit_tokens == 1536 and response.request_id == "resp_2"


def test_cache_ttl_default(make_provider):
    provider = make_provider("responses", Recorder(httpx.Response(200, json={})))
    assert provider.cache_ttl_minutes == 10


def test_every_output_item_goes_back_out_as_it_came(make_provider):
    """With ``store: false`` the next request must carry the previous output items as they
    came — encrypted reasoning, item ids, item types ctxfold does not model (a custom tool
    call). They were dropped: only the text, the reasoning summary and the calls remained."""
    output = [
        {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA-opaque",
         "summary": [{"type": "summary_text", "text": "s"}]},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Patching.", "annotations": []}]},
        {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_p", "name": "apply_patch",
         "input": "*** Begin Patch\n*** End Patch\n", "status": "completed"},
        {"type": "function_call", "id": "fc_1", "call_id": "call_z", "name": "ls",
         "arguments": "{}", "status": "completed"},
    ]
    body = {"id": "resp_3", "status": "completed", "usage": USAGE, "output": output}
    provider = make_provider("responses", Recorder(httpx.Response(200, json=body)))
    message = provider.complete(ChatRequest(messages=MESSAGES[:2], stream=False)).message
    assert message.content == "Patching."
    assert message.tool_calls == (ToolCall(id="call_z", name="ls", arguments="{}"),)
    resent = input_items([message])
    assert resent == output
    events = [ev("response.created", response={"id": "resp_3"}),
              *[ev("response.output_item.done", output_index=i, item=item)
                for i, item in enumerate(output)], completed()]
    streamed = make_provider("responses", Recorder(sse_response(events))).complete(
        ChatRequest(messages=MESSAGES[:2], stream=True)).message
    assert input_items([streamed]) == output
