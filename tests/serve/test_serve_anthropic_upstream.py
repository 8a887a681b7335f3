"""``ctxfold serve`` in front of an Anthropic upstream (the emulator's ``anthropic``
profile, which accounts the prompt cache at explicit breakpoints as Anthropic does): the
Anthropic SDK end to end with cache reads reported, the reverse translation for OpenAI
clients, the client's key sent as ``x-api-key``, Anthropic's errors through either route."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import anthropic
import pytest
from openai import OpenAI
from tests.serve.conftest import BASH, HeaderEmulator, call, log_text, quarter
from tests.serve.test_serve_anthropic import BASH as BASH_ANTHROPIC
from tests.serve.test_serve_anthropic import (
    MARK,
    SECRET,
    SYSTEM,
    TASKS,
    client_of,
    loop,
    script,
)

from ctxfold import Fault, ReplySpec
from ctxfold.interop.anthropic import from_anthropic
from ctxfold.serve.sessions import USE_CAPABILITY, reconcile

#: The headers an Anthropic upstream is checked for: the key, a bearer, the betas.
KEY_HEADERS = ("x-api-key", "authorization", "anthropic-beta")


def marks(body: Mapping[str, Any]) -> list[Any]:
    """Every ``cache_control`` mark of a body, in order."""
    found: list[Any] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if "cache_control" in value:
                found.append(value["cache_control"])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(body)
    return found


@pytest.mark.parametrize("stream", [False, True])
def test_the_anthropic_sdk_through_serve_to_an_anthropic_upstream(serve,
                                                                  stream: bool) -> None:
    # The extractive summarizer: the emulator's anthropic profile merges consecutive user
    # messages as the API does, so a summary instruction after a user message is not
    # recognised by it as one (an emulator limit, not a wire one).
    served = serve("anthropic", script=script(), window=5000, summarizer="extractive")
    messages, headers, replies = loop(served, stream)
    actions = [h["x-ctxfold-action"] for h in headers]
    assert actions.count("summary") >= 3, actions
    assert len({h["x-ctxfold-session"] for h in headers}) == 1
    session = headers[-1]["x-ctxfold-session"]
    history = from_anthropic([{"type": "text", "text": SYSTEM}], messages)
    canonical = served.canonical(session)
    assert reconcile(canonical, history).matched == len(history)
    assert sum(1 for m in canonical for c in m.tool_calls if c.name == USE_CAPABILITY) == 3
    bodies = [json.loads(b) for b in served.bodies]
    for body in bodies:
        # ctxfold's breakpoints, never the client's moving ones: at most four, 1h before 5m.
        assert len(marks(body)) <= 4
        assert body["max_tokens"] == 1024 and body.get("stream", False) is stream
        assert body["tools"][0]["name"] == "bash"
    assert sum(1 for b in bodies if marks(b)) > len(bodies) // 2
    # The prompt cache worked across turns, and the client was told in Anthropic's terms.
    assert any(r.usage.cache_read_input_tokens for r in replies)
    assert any(r.usage.cache_creation_input_tokens for r in replies)
    # What the client was told is what the upstream counted (use_capability rounds
    # included).
    own = [r for r in served.emu.requests if r.status == 200]
    assert sum(r.usage.cache_read_input_tokens for r in replies) == \
        sum(r.cache_hit_tokens for r in own)
    assert sum(r.usage.cache_creation_input_tokens for r in replies) == \
        sum(r.cache_write_tokens for r in own)


def test_thinking_and_its_signature_reach_the_anthropic_client(serve) -> None:
    served = serve("anthropic", script=[ReplySpec(text="done", reasoning="let me think")] * 2)
    client = client_of(served)
    plain = client.messages.create(model="claude-sonnet-4-6", max_tokens=256,
                                   messages=[{"role": "user", "content": "go"}])
    with client.messages.stream(model="claude-sonnet-4-6", max_tokens=256,
                                messages=[{"role": "user", "content": "again"}]) as events:
        streamed = events.get_final_message()
    for message in (plain, streamed):
        thinking = message.content[0]
        assert thinking.type == "thinking" and thinking.thinking == "let me think"
        assert thinking.signature
        assert message.content[1].type == "text" and message.content[1].text == "done"
    assert plain.content[0].signature == streamed.content[0].signature


def test_the_clients_key_goes_to_an_anthropic_upstream_as_x_api_key(serve) -> None:
    emu = HeaderEmulator("anthropic", names=KEY_HEADERS, counter=quarter,
                         script=[ReplySpec(text="ok")] * 2, require_key=SECRET)
    served = serve(emulator=emu, api_key=None)
    client = client_of(served, default_headers={"anthropic-beta": "context-1m-2025-08-07"})
    assert client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=[
        {"role": "user", "content": "go"}]).content[0].text == "ok"
    openai = OpenAI(base_url=served.base, api_key=SECRET, max_retries=0, timeout=30)
    assert openai.chat.completions.create(model="claude-sonnet-4-6", messages=[
        {"role": "user", "content": "hi"}]).choices[0].message.content == "ok"
    # x-api-key, never a bearer; the beta header of the Anthropic client passed on.
    assert emu.keys == [(SECRET, None, "context-1m-2025-08-07"), (SECRET, None, None)]


@pytest.mark.parametrize("stream", [False, True])
def test_an_openai_client_runs_a_tool_loop_against_an_anthropic_upstream(serve,
                                                                        stream: bool) -> None:
    served = serve("anthropic", script=script(), window=5000, summarizer="extractive")
    client = OpenAI(base_url=served.base, api_key="sk-unused", max_retries=0, timeout=30)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    actions = []
    for task in TASKS:
        messages.append({"role": "user", "content": task})
        while True:
            message, headers = chat_turn(client, messages, stream)
            actions.append(headers["x-ctxfold-action"])
            messages.append(message)
            if not message.get("tool_calls"):
                break
            for c in message["tool_calls"]:
                assert c["function"]["name"] == "bash"
                messages.append({"role": "tool", "tool_call_id": c["id"],
                                 "content": log_text(3000, c["id"])})
    assert actions.count("summary") >= 2, actions
    body = json.loads(served.bodies[-1])
    assert body["max_tokens"] == 512 and body["stop_sequences"] == ["END"]
    assert body.get("stream", False) is stream
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert body["tools"][0] == {"name": "bash", "description": "Run a shell command.",
                                "input_schema": BASH["function"]["parameters"]}
    assert body["system"][0]["text"] == SYSTEM
    assert len(marks(body)) <= 4


def chat_turn(client: OpenAI, messages: list[dict[str, Any]],
              stream: bool) -> tuple[dict[str, Any], Any]:
    """One chat call; the assistant message as the agent appends it, and the headers."""
    raw = client.chat.completions.with_raw_response.create(
        model="claude-sonnet-4-6", messages=messages, tools=[BASH],
        max_completion_tokens=512, stop="END", parallel_tool_calls=False, stream=stream)
    if not stream:
        choice = raw.parse().choices[0]
        assert choice.finish_reason == ("tool_calls" if choice.message.tool_calls else "stop")
        return choice.message.model_dump(exclude_none=True), raw.headers
    text, calls, finish = [], {}, None
    for chunk in raw.parse():
        for part in chunk.choices:
            finish = part.finish_reason or finish
            text.append(part.delta.content or "")
            for frag in part.delta.tool_calls or ():
                slot = calls.setdefault(frag.index, {"id": "", "type": "function",
                                                     "function": {"name": "", "arguments": ""}})
                slot["id"] = frag.id or slot["id"]
                slot["function"]["name"] += frag.function.name or ""
                slot["function"]["arguments"] += frag.function.arguments or ""
    assert finish == ("tool_calls" if calls else "stop")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if calls:
        message["tool_calls"] = [calls[k] for k in sorted(calls)]
    return message, raw.headers


def test_a_responses_client_against_an_anthropic_upstream(serve) -> None:
    served = serve("anthropic", script=[call("c1"), ReplySpec(text="fine")])
    client = OpenAI(base_url=served.base, api_key="sk-unused", max_retries=0, timeout=30)
    items: list[Any] = [{"role": "user", "content": "go"}]
    first = client.responses.create(model="claude-sonnet-4-6", instructions=SYSTEM,
                                    input=items, store=False, tools=[{
                                        "type": "function", "name": "bash",
                                        "parameters": BASH["function"]["parameters"]}])
    calls = [i for i in first.output if i.type == "function_call"]
    assert [c.name for c in calls] == ["bash"]
    items += [i.model_dump(exclude_none=True) for i in first.output]
    items.append({"type": "function_call_output", "call_id": calls[0].call_id,
                  "output": "a b"})
    second = client.responses.create(model="claude-sonnet-4-6", instructions=SYSTEM,
                                     input=items, store=False)
    assert second.output_text == "fine"
    body = json.loads(served.bodies[-1])
    assert body["max_tokens"] > 0  # required by the API: the output ladder's
    assert body["messages"][-1]["content"][0]["type"] == "tool_result"


@pytest.mark.parametrize(("model", "most"), [("claude-opus-4-1", 32_000),
                                           ("claude-3-5-haiku", 8_192),
                                           ("claude-sonnet-4-6", 64_000)])
def test_a_client_without_max_tokens_gets_what_the_model_accepts(serve, model: str,
                                                                  most: int) -> None:
    """The API requires ``max_tokens``: an OpenAI client that sends none gets the output
    ladder within what the model accepts (Opus 4.1 stops at 32K, Haiku 3.5 at 8K)."""
    served = serve("anthropic", script=[ReplySpec(text="fine")])
    client = OpenAI(base_url=served.base, api_key="sk-unused", max_retries=0, timeout=30)
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                   reasoning_effort="high")
    assert json.loads(served.bodies[-1])["max_tokens"] == most


def test_the_room_left_never_passes_what_the_model_accepts(serve) -> None:
    """A window that leaves more room than Opus 4.1 accepts (32K) but less than the ladder
    (64K): the prepared budget is within the model's largest output too, as ``complete()``
    sends it (review of issue 26: the proxy sent the room, which the API refuses)."""
    served = serve("anthropic", script=[ReplySpec(text="fine")], window=60_000)
    client = OpenAI(base_url=served.base, api_key="sk-unused", max_retries=0, timeout=30)
    client.chat.completions.create(model="claude-opus-4-1", reasoning_effort="high",
                                   messages=[{"role": "user", "content": "hi"}])
    assert json.loads(served.bodies[-1])["max_tokens"] == 32_000


def test_anthropic_errors_reach_either_kind_of_client_in_its_shape(serve) -> None:
    served = serve("anthropic", script=[ReplySpec(text="ok")] * 4,
                   faults=[Fault("overloaded", at=0), Fault("overloaded", at=1)])
    with pytest.raises(anthropic.OverloadedError) as overloaded:
        client_of(served).messages.create(model="claude-sonnet-4-6", max_tokens=64,
                                          messages=[{"role": "user", "content": "go"}])
    assert overloaded.value.body["error"]["type"] == "overloaded_error"
    openai = OpenAI(base_url=served.base, api_key="sk-unused", max_retries=0, timeout=30)
    from openai import APIStatusError
    with pytest.raises(APIStatusError) as refused:
        openai.chat.completions.create(model="claude-sonnet-4-6",
                                       messages=[{"role": "user", "content": "go"}])
    assert refused.value.status_code == 529
    assert refused.value.body["type"] == "overloaded_error"  # the SDK gives error's body


def test_the_clients_marks_never_reach_an_anthropic_upstream(serve) -> None:
    served = serve("anthropic", script=[ReplySpec(text="ok")])
    client_of(served).messages.create(
        model="claude-sonnet-4-6", max_tokens=64, cache_control=MARK,
        system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral",
                                                                     "ttl": "1h"}}],
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "a", "cache_control": MARK},
            {"type": "text", "text": "b", "cache_control": MARK},
            {"type": "text", "text": "c", "cache_control": MARK}]}])
    body = json.loads(served.bodies[-1])
    assert "cache_control" not in {k for k in body}
    assert marks(body) == []  # all below the cache minimum: none placed
    assert [b["text"] for b in body["messages"][0]["content"]] == ["a", "b", "c"]


@pytest.mark.parametrize(("fields", "expected"), [
    ({"reasoning_effort": "xhigh", "max_completion_tokens": 9},
     {"output_config": {"effort": "max"}, "max_tokens": 9}),
    ({"reasoning": {"effort": "none"}}, {}),  # no counterpart: the model's default
    ({"tool_choice": "none", "parallel_tool_calls": False}, {"tool_choice": {"type": "none"}}),
    ({"tool_choice": {"type": "function", "function": {"name": "bash"}},
      "parallel_tool_calls": False},
     {"tool_choice": {"type": "tool", "name": "bash", "disable_parallel_tool_use": True}}),
    ({"stop": "END", "user": "u1", "seed": 3, "logprobs": True},
     {"stop_sequences": ["END"], "metadata": {"user_id": "u1"}}),
])
def test_openai_fields_for_an_anthropic_upstream(fields: dict[str, Any],
                                                 expected: dict[str, Any]) -> None:
    from ctxfold.serve.upstream import translate_fields

    assert translate_fields(fields, "messages", "chat") == expected


def test_checkpoint_summaries_go_with_the_requests_key_and_beta_headers(serve) -> None:
    """The summary a request needs is that request's call: its forwarded x-api-key and its
    anthropic-beta (tools it carries may need the beta)."""
    replies = [call(f"c{k}", command=f"step {k}") for k in range(8)]
    emu = HeaderEmulator("anthropic", names=KEY_HEADERS, counter=quarter, require_key=SECRET,
                         script=[*replies, ReplySpec(text="done")])
    served = serve(emulator=emu, api_key=None, window=5000)
    client = client_of(served, default_headers={"anthropic-beta": "context-1m-2025-08-07"})
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Find the bug."}]
    actions = []
    while True:
        raw = client.messages.with_raw_response.create(
            model="claude-sonnet-4-6", max_tokens=256, tools=[BASH_ANTHROPIC],
            messages=messages)
        actions.append(raw.headers["x-ctxfold-action"])
        blocks = [b.model_dump(exclude_none=True) for b in raw.parse().content]
        messages.append({"role": "assistant", "content": blocks})
        calls = [b for b in blocks if b["type"] == "tool_use"]
        if not calls:
            break
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c["id"], "content": log_text(3000, c["id"])}
            for c in calls]})
    assert "summary" in actions
    summaries = [i for i, r in enumerate(emu.requests)
                 if "[ctxfold:summary-request]" in json.dumps(r.body["messages"][-1])]
    assert summaries
    assert set(emu.keys) == {(SECRET, None, "context-1m-2025-08-07")}
