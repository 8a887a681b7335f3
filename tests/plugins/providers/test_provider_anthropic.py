"""The ``anthropic`` provider: headers, body, breakpoints, stream assembly, usage, errors —
checked against the official SDK's types and accumulator where it has them."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import httpx2
import pytest
from anthropic.types import message_create_params
from providers_support import SECRET, Recorder, sse_bytes, sse_response
from pydantic import TypeAdapter

from ctxfold import (
    ChatRequest,
    ContextLimitError,
    Message,
    ProviderConnectionError,
    RateLimitError,
    ServerError,
    SseEvent,
    ToolCall,
    ToolSchema,
)
from ctxfold.interop.anthropic import from_anthropic, to_anthropic
from ctxfold.kernel.config import ProviderConfig
from ctxfold.kernel.summary import wrap_summary
from ctxfold.plugins.providers.anthropic import (
    DEFAULTS,
    AnthropicStream,
    AnthropicTranslator,
    cache_minimum,
)
from ctxfold.transport.provider import partial_message_of

MESSAGES = (
    Message(role="system", content="Be brief."),
    Message(role="user", content="read a"),
    Message(role="assistant", content="Reading.",
            tool_calls=(ToolCall(id="toolu_a", name="read", arguments='{"p":"a"}'),
                        ToolCall(id="toolu_b", name="read", arguments='{"p":"b"}'))),
    Message(role="tool", content="A", tool_call_id="toolu_a"),
    Message(role="tool", content="B", tool_call_id="toolu_b"),
    Message(role="user", content="note", local_only=True),
)
TOOL = ToolSchema(name="read", description="read a file",
                  parameters={"type": "object", "properties": {"p": {"type": "string"}}})
START_USAGE = {"input_tokens": 40, "cache_creation_input_tokens": 1200,
               "cache_read_input_tokens": 9000, "output_tokens": 1}


def ev(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return kind, {"type": kind, **fields}


def reply_events(*, split_json: bool = True) -> list[Any]:
    """A reply with thinking (+ signature), text with a citation, and a tool call whose
    input arrives in pieces; ping and a comment in between."""
    pieces = ['{"p": "c', '", "n"', ': [1, 2]}'] if split_json else ['{"p": "c", "n": [1, 2]}']
    return [
        ev("message_start", message={
            "id": "msg_01", "type": "message", "role": "assistant", "content": [],
            "model": "claude-sonnet-4-6", "stop_reason": None, "stop_sequence": None,
            "usage": START_USAGE}),
        ev("content_block_start", index=0,
           content_block={"type": "thinking", "thinking": "", "signature": ""}),
        ev("content_block_delta", index=0, delta={"type": "thinking_delta",
                                                  "thinking": "Need c. "}),
        ev("ping"),
        ": a comment line\n\n",
        ev("content_block_delta", index=0, delta={"type": "thinking_delta",
                                                  "thinking": "Read it."}),
        ev("content_block_delta", index=0, delta={"type": "signature_delta",
                                                  "signature": "EqQBCgIYAhIM=="}),
        ev("content_block_stop", index=0),
        ev("content_block_start", index=1, content_block={"type": "text", "text": ""}),
        ev("content_block_delta", index=1, delta={"type": "text_delta", "text": "Reading "}),
        ev("content_block_delta", index=1, delta={"type": "text_delta", "text": "c ✓."}),
        ev("content_block_stop", index=1),
        ev("content_block_start", index=2, content_block={
            "type": "tool_use", "id": "toolu_c", "name": "read", "input": {}}),
        *[ev("content_block_delta", index=2, delta={"type": "input_json_delta",
                                                    "partial_json": p}) for p in pieces],
        ev("content_block_stop", index=2),
        ev("message_delta", delta={"stop_reason": "tool_use", "stop_sequence": None},
           usage={"output_tokens": 57}),
        ev("message_stop"),
    ]


REPLY_CONTENT = [
    {"type": "thinking", "thinking": "Need c. Read it.", "signature": "EqQBCgIYAhIM=="},
    {"type": "text", "text": "Reading c ✓."},
    {"type": "tool_use", "id": "toolu_c", "name": "read", "input": {"p": "c", "n": [1, 2]}},
]


def anthropic_sse(events: list[Any]) -> httpx.Response:
    return sse_response(events, done=False)


def test_request_headers_and_body_exact(make_provider) -> None:
    rec = Recorder(anthropic_sse(reply_events()))
    provider = make_provider("anthropic", rec)
    provider.complete(ChatRequest(messages=MESSAGES, tools=(TOOL,), effort="low"))
    sent = rec.requests[0]
    assert sent.url == "https://api.anthropic.com/v1/messages"
    assert sent.headers["x-api-key"] == SECRET
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    assert rec.body() == {
        "model": "m-1",
        "tools": [{"name": "read", "description": "read a file",
                   "input_schema": {"type": "object",
                                    "properties": {"p": {"type": "string"}}}}],
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": "read a"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {"p": "a"}},
                {"type": "tool_use", "id": "toolu_b", "name": "read", "input": {"p": "b"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "B"}]},
        ],
        "max_tokens": 32_768,
        "thinking": {"type": "enabled", "budget_tokens": 4096},  # not a Claude model id
        "output_config": {"effort": "low"},
        "stream": True,
    }  # no breakpoint: the prompt is far below the 1,024-token minimum


@pytest.mark.parametrize(("model", "effort", "room", "fields"), [
    ("claude-sonnet-4-6", "high", 0, {"thinking": {"type": "adaptive"},
                                      "output_config": {"effort": "high"}}),
    ("claude-opus-4-7", "max", 0, {"thinking": {"type": "adaptive"},
                                   "output_config": {"effort": "max"}}),
    ("claude-haiku-4-5", "medium", 0, {"thinking": {"type": "enabled",
                                                    "budget_tokens": 10_240}}),
    ("claude-sonnet-4-20250514", "high", 0, {"thinking": {"type": "enabled",
                                                          "budget_tokens": 20_480}}),
    ("claude-3-7-sonnet-latest", "high", 5000, {"thinking": {"type": "enabled",
                                                             "budget_tokens": 2500}}),
    ("claude-haiku-4-5", "high", 1500, {}),  # no room for the 1,024 minimum below max_tokens
    ("deepseek-v4-flash", "high", 0, {"thinking": {"type": "enabled", "budget_tokens": 20_480},
                                      "output_config": {"effort": "high"}}),
    ("claude-sonnet-4-6", "none", 0, {}),
])
def test_thinking_fields_by_model(model, effort, room, fields) -> None:
    body = AnthropicTranslator().build_body(
        ChatRequest(messages=MESSAGES[:2], effort=effort, output_room=room), model=model)
    got = {k: body[k] for k in ("thinking", "output_config") if k in body}
    assert got == fields
    if "budget_tokens" in got.get("thinking", {}):
        assert 1024 <= got["thinking"]["budget_tokens"] < body["max_tokens"]


@pytest.mark.parametrize(("model", "effort", "max_tokens", "thinking"), [
    # The models overview's "Max output" and "Extended thinking" rows
    # (https://docs.anthropic.com/en/docs/about-claude/models/overview).
    ("claude-opus-4-1-20250805", "high", 32_000, True),
    ("claude-opus-4-20250514", "max", 32_000, True),
    ("claude-opus-4-1", "none", 16_384, False),
    ("claude-3-5-haiku-20241022", "high", 8_192, False),
    ("claude-3-5-haiku-latest", "low", 8_192, False),
    ("claude-3-haiku-20240307", "high", 4_096, False),
    ("claude-3-opus-20240229", "medium", 4_096, False),
    ("claude-3-5-sonnet-20241022", "high", 8_192, False),
    ("claude-3-7-sonnet-20250219", "high", 64_000, True),
    ("claude-sonnet-4-20250514", "high", 64_000, True),
    ("claude-opus-4-5", "high", 64_000, True),
    ("claude-sonnet-4-6", "max", 64_000, True),
])
def test_default_max_tokens_and_thinking_follow_the_model(model, effort, max_tokens,
                                                          thinking) -> None:
    """Finding 7 of the issue-28 review: Opus 4 / 4.1 accept 32K at most, Claude 3 Haiku 4K,
    3.5 Haiku 8K, and the Claude 3 / 3.5 models have no extended thinking."""
    body = AnthropicTranslator().build_body(ChatRequest(messages=MESSAGES[:2], effort=effort),
                                            model=model)
    assert body["max_tokens"] == max_tokens
    assert ("thinking" in body) is thinking
    if thinking and body["thinking"]["type"] == "enabled":
        assert 1024 <= body["thinking"]["budget_tokens"] < max_tokens
    # an explicit max_output_tokens is the host's: sent as given
    explicit = AnthropicTranslator().build_body(
        ChatRequest(messages=MESSAGES[:2], effort=effort, max_output_tokens=1000), model=model)
    assert explicit["max_tokens"] == 1000


def test_the_body_is_a_valid_sdk_request() -> None:
    """The SDK's own request TypedDict accepts what ctxfold sends (a check that shares no
    code with the translator)."""
    request = ChatRequest(messages=(*MESSAGES, Message(role="user", content="x" * 9000)),
                          tools=(TOOL,))
    body = AnthropicTranslator(ttl="1h").build_body(request, model="claude-sonnet-4-6")
    adapter = TypeAdapter(message_create_params.MessageCreateParamsStreaming)
    checked = adapter.validate_python(body, strict=True)
    list(checked["messages"])  # the SDK checks its iterables as they are read
    assert checked["max_tokens"] == body["max_tokens"] and checked["stream"] is True
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral",
                                                                    "ttl": "5m"}


@pytest.mark.parametrize(("effort", "cap", "room", "expected"), [
    ("none", 0, 0, 16_384), ("medium", 0, 0, 32_768), ("high", 0, 0, 64_000),
    ("max", 0, 0, 64_000), ("high", 1000, 0, 1000), ("high", 0, 5000, 5000),
    ("high", 9000, 5000, 5000),
])
def test_max_tokens_is_always_sent_from_the_output_rule(make_provider, effort, cap, room,
                                                        expected) -> None:
    rec = Recorder(anthropic_sse(reply_events()))
    provider = make_provider("anthropic", rec)
    provider.complete(ChatRequest(messages=MESSAGES[:2], effort=effort,
                                  max_output_tokens=cap, output_room=room))
    body = rec.body()
    assert body["max_tokens"] == expected
    # "m-1" is no Claude id: manual thinking, whose 1,024 minimum must stay below max_tokens
    thinks = effort != "none" and expected >= 2048
    assert ("thinking" in body) == thinks
    if thinks:
        assert body["output_config"] == {"effort": effort}


def big(n: int) -> str:
    return "word " * n


def checkpointed(tail: int) -> tuple[Message, ...]:
    """System + summary + tail: the shape the engine sends after a checkpoint."""
    messages = [Message(role="system", content="You are an agent. " + big(1500)),
                wrap_summary("## Goal\n- fix the bug " + big(1500))]
    for i in range(tail):
        messages.append(Message(role="user", content=f"step {i} " + big(300)))
        messages.append(Message(role="assistant", content=f"done {i}"))
    return tuple(messages)


def cache_marks(body: dict[str, Any]) -> list[tuple[str, str]]:
    found = []
    for i, b in enumerate(body.get("system", ())):
        if "cache_control" in b:
            found.append((f"system[{i}]", b["cache_control"]["ttl"]))
    for i, t in enumerate(body.get("tools", ())):
        if "cache_control" in t:
            found.append((f"tools[{i}]", t["cache_control"]["ttl"]))
    for i, m in enumerate(body["messages"]):
        for j, b in enumerate(m["content"] if isinstance(m["content"], list) else ()):
            if "cache_control" in b:
                found.append((f"messages[{i}].content[{j}]", b["cache_control"]["ttl"]))
    return found


@pytest.mark.parametrize(("minutes", "ttl"), [(0, "5m"), (5, "5m"), (60, "1h"), (1440, "1h")])
def test_breakpoints_on_system_checkpoint_and_newest(make_provider, minutes, ttl) -> None:
    rec = Recorder(anthropic_sse(reply_events()))
    provider = make_provider("anthropic", rec, provider=ProviderConfig(
        name="anthropic", model="claude-sonnet-4-6", cache_ttl_minutes=minutes))
    provider.complete(ChatRequest(messages=checkpointed(3), tools=(TOOL,)))
    body = rec.body()
    assert cache_marks(body) == [("system[0]", ttl), ("messages[0].content[0]", ttl),
                                 ("messages[6].content[0]", "5m")]
    assert body["messages"][0]["content"][0]["text"].startswith("<compaction-summary>")


def test_no_breakpoint_below_the_models_minimum(make_provider) -> None:
    rec = Recorder(anthropic_sse(reply_events()))
    provider = make_provider("anthropic", rec, provider=ProviderConfig(
        name="anthropic", model="claude-haiku-4-5"))
    short = (Message(role="system", content="sys " + big(1000)),
             Message(role="user", content="hi"))
    provider.complete(ChatRequest(messages=short))
    assert cache_marks(rec.body()) == []  # ~1,250 tokens < Haiku 4.5's 4,096
    assert cache_minimum("claude-haiku-4-5") == 4096
    assert cache_minimum("claude-sonnet-4-6") == 1024


def test_host_breakpoints_are_replaced_by_ctxfolds(make_provider) -> None:
    system = [{"type": "text", "text": "sys " + big(2000),
               "cache_control": {"type": "ephemeral"}}]
    messages = [{"role": "user", "content": [
        {"type": "text", "text": f"m{i} " + big(10), "cache_control": {"type": "ephemeral"}}]}
        for i in range(5)]
    rec = Recorder(anthropic_sse(reply_events()))
    provider = make_provider("anthropic", rec)
    provider.complete(ChatRequest(messages=tuple(from_anthropic(system, messages))))
    assert cache_marks(rec.body()) == [("system[0]", "5m"), ("messages[4].content[0]", "5m")]


def test_stream_assembly_keeps_every_block_exactly(make_provider) -> None:
    rec = Recorder(anthropic_sse(reply_events()))
    provider = make_provider("anthropic", rec)
    response = provider.complete(ChatRequest(messages=MESSAGES[:2]))
    m = response.message
    assert m.content == "Reading c ✓." and m.reasoning_content == "Need c. Read it."
    assert m.tool_calls == (ToolCall("toolu_c", "read", '{"p":"c","n":[1,2]}'),)
    assert response.finish_reason == "tool_calls"
    assert response.request_id == "msg_01"
    u = response.usage
    assert (u.prompt_tokens, u.cache_hit_tokens, u.cache_miss_tokens, u.cache_write_tokens,
            u.completion_tokens) == (10_240, 9000, 1240, 1200, 57)
    # the reply goes back out exactly as it came, signature included
    assert to_anthropic([m])[1] == [{"role": "assistant", "content": REPLY_CONTENT}]
    rec2 = Recorder(anthropic_sse(reply_events()))
    make_provider("anthropic", rec2).complete(ChatRequest(messages=(*MESSAGES[:2], m)))
    assert rec2.body()["messages"][-1]["content"][:2] == REPLY_CONTENT[:2]


def test_the_sdks_own_accumulator_builds_the_same_message() -> None:
    """The official SDK reads the same event stream; its final message's content is what
    ctxfold sends back for its own assembled message."""
    raw = sse_bytes(reply_events(), done=False)
    client = anthropic.Anthropic(
        api_key="test", base_url="http://127.0.0.1:1",
        # the SDK brings its own HTTP library (httpx2), not httpx
        http_client=httpx2.Client(transport=httpx2.MockTransport(
            lambda _r: httpx2.Response(200, headers={"content-type": "text/event-stream"},
                                       content=raw))))
    with client.messages.stream(model="claude-sonnet-4-6", max_tokens=10,
                                messages=[{"role": "user", "content": "x"}]) as stream:
        final = stream.get_final_message()
    sdk_content = [b.model_dump(exclude_none=True) for b in final.content]
    ours = AnthropicStream()
    for name, payload in (e for e in reply_events() if isinstance(e, tuple)):
        if ours.feed(SseEvent(event=name, data=json.dumps(payload))):
            break
    sent = to_anthropic([ours.finish("").message])[1][0]["content"]
    assert sent == sdk_content
    assert final.stop_reason == "tool_use" and final.usage.output_tokens == 57


def test_a_non_streaming_answer(make_provider) -> None:
    body = {"id": "msg_2", "type": "message", "role": "assistant", "model": "m-1",
            "content": REPLY_CONTENT[:2], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 3}}
    rec = Recorder(httpx.Response(200, json=body))
    provider = make_provider("anthropic", rec)
    response = provider.complete(ChatRequest(messages=MESSAGES[:2], stream=False))
    assert response.finish_reason == "stop" and response.message.content == "Reading c ✓."
    assert to_anthropic([response.message])[1][0]["content"] == REPLY_CONTENT[:2]
    assert rec.body()["stream"] is False
    assert anthropic.types.Message.model_validate(body).content[1].text == "Reading c ✓."


@pytest.mark.parametrize(("reason", "finish"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("tool_use", "tool_calls"),
    ("max_tokens", "length"), ("refusal", "refusal"), ("pause_turn", "pause_turn"),
    ("model_context_window_exceeded", "length"),
])
def test_stop_reasons(make_provider, reason, finish) -> None:
    events = [e for e in reply_events() if not (isinstance(e, tuple)
                                                and e[0] == "message_delta")]
    events.insert(-1, ev("message_delta", delta={"stop_reason": reason},
                         usage={"output_tokens": 2}))
    rec = Recorder(anthropic_sse(events))
    response = make_provider("anthropic", rec).complete(ChatRequest(messages=MESSAGES[:2]))
    assert response.finish_reason == finish


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def test_529_overloaded_is_retried_like_503(make_provider) -> None:
    waits: list[float] = []
    rec = Recorder(httpx.Response(529, json=error_body("overloaded_error", "Overloaded")),
                   anthropic_sse(reply_events()))
    provider = make_provider("anthropic", rec, sleep=waits.append)
    response = provider.complete(ChatRequest(messages=MESSAGES[:2]))
    assert response.message.content == "Reading c ✓."
    assert len(rec.requests) == 2 and len(waits) == 1


def test_529_every_time_is_a_server_error_naming_anthropics_message(make_provider) -> None:
    rec = Recorder(httpx.Response(529, json=error_body("overloaded_error", "Overloaded")))
    provider = make_provider("anthropic", rec, max_retries=2)
    with pytest.raises(ServerError, match=r"HTTP 529.*'Overloaded'") as info:
        provider.complete(ChatRequest(messages=MESSAGES[:2]))
    assert len(rec.requests) == 3 and SECRET not in str(info.value)


def test_429_waits_what_retry_after_says(make_provider) -> None:
    waits: list[float] = []
    rec = Recorder(httpx.Response(429, headers={"retry-after": "7"},
                                  json=error_body("rate_limit_error", "slow down")),
                   anthropic_sse(reply_events()))
    provider = make_provider("anthropic", rec, sleep=waits.append)
    provider.complete(ChatRequest(messages=MESSAGES[:2]))
    assert waits == [7.0]
    rec = Recorder(httpx.Response(429, headers={"retry-after": "7"},
                                  json=error_body("rate_limit_error", "slow down")))
    with pytest.raises(RateLimitError, match="slow down") as info:
        make_provider("anthropic", rec, max_retries=0).complete(
            ChatRequest(messages=MESSAGES[:2]))
    assert info.value.retry_after == 7.0


def test_prompt_too_long_is_the_overflow_error_with_its_numbers(make_provider) -> None:
    rec = Recorder(httpx.Response(400, json=error_body(
        "invalid_request_error", "prompt is too long: 201234 tokens > 200000 maximum")))
    with pytest.raises(ContextLimitError) as info:
        make_provider("anthropic", rec).complete(ChatRequest(messages=MESSAGES[:2]))
    assert (info.value.window, info.value.prompt) == (200_000, 201_234)
    assert len(rec.requests) == 1


def test_an_error_event_in_the_stream_is_typed(make_provider) -> None:
    events = [*reply_events()[:3], ev("error", error={"type": "overloaded_error",
                                                      "message": "Overloaded"})]
    rec = Recorder(anthropic_sse(events))
    with pytest.raises(ServerError, match="Overloaded") as info:
        make_provider("anthropic", rec).complete(ChatRequest(messages=MESSAGES[:2]))
    partial = partial_message_of(info.value)
    assert partial is not None and partial.partial and partial.reasoning_content == "Need c. "


def test_a_stream_cut_before_message_stop_carries_the_partial_reply(make_provider) -> None:
    events = [e for e in reply_events() if not (isinstance(e, tuple)
                                                and e[0] == "message_stop")]
    rec = Recorder(anthropic_sse(events))
    with pytest.raises(ProviderConnectionError, match="message_stop") as info:
        make_provider("anthropic", rec, max_retries=0).complete(
            ChatRequest(messages=MESSAGES[:2]))
    partial = partial_message_of(info.value)
    assert partial is not None and partial.content == "Reading c ✓."
    assert partial.tool_calls == (ToolCall("toolu_c", "read", '{"p":"c","n":[1,2]}'),)
    assert not partial.anthropic_blocks


def test_defaults_are_declared() -> None:
    assert (DEFAULTS.model, DEFAULTS.context_window, DEFAULTS.cache_ttl_minutes,
            DEFAULTS.base_url, DEFAULTS.api_key_env) == (
        "claude-sonnet-4-6", 200_000, 5, "https://api.anthropic.com", "ANTHROPIC_API_KEY")
    assert DEFAULTS.output_budget("high") == 64_000  # Sonnet 4.6's largest max_tokens


def test_turn_n_plus_1_extends_turn_n_apart_from_the_moving_breakpoint() -> None:
    """The messages of turn n are a prefix of turn n+1's once the cache_control markers
    (not content: the API does not hash them) are left aside."""
    translator = AnthropicTranslator(ttl="1h")
    history = checkpointed(4)
    reply = from_anthropic(None, [{"role": "assistant", "content": REPLY_CONTENT}])[0]
    one = translator.build_body(ChatRequest(messages=history, tools=(TOOL,)), model="m")
    two = translator.build_body(ChatRequest(messages=(*history, reply, Message(
        role="tool", content="c", tool_call_id="toolu_c")), tools=(TOOL,)), model="m")

    def unmarked(value: Any) -> Any:
        if isinstance(value, dict):
            value = {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
            content = value.get("content")
            if (isinstance(content, list) and len(content) == 1
                    and set(content[0]) == {"type", "text"} and content[0]["type"] == "text"):
                value["content"] = content[0]["text"]  # the marked newest string, unmarked
            return value
        return [unmarked(v) for v in value] if isinstance(value, list) else value

    n = len(one["messages"])
    assert unmarked(two["messages"][:n]) == unmarked(one["messages"])
    assert unmarked(two["system"]) == unmarked(one["system"])
    assert unmarked(two["tools"]) == unmarked(one["tools"])
    assert one["messages"][-1] != two["messages"][n - 1]  # only the marker moved
