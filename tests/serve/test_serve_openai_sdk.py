"""The official OpenAI Python SDK against ``ctxfold serve``: chat and Responses, streaming
and not, a tool loop that reaches a checkpoint; ``use_capability`` never reaches the SDK."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai import OpenAI
from tests.serve.conftest import (
    BASH,
    BASH_RESPONSES,
    Served,
    call,
    extends_between_installs,
    log_text,
)
from tests.serve.test_serve_chat import SYSTEM, TASKS

import ctxfold
from ctxfold import ReplySpec
from ctxfold.interop.coerce import to_messages
from ctxfold.serve.sessions import USE_CAPABILITY, reconcile


def script() -> list[ReplySpec]:
    """Per task: a bash call, a use_capability call (answered by the proxy), three more
    bash calls, the answer."""
    replies: list[ReplySpec] = []
    for t in range(len(TASKS)):
        replies += [call(f"call_{t}a", command="ls"), call(f"cap_{t}", USE_CAPABILITY,
                                                           action="list")]
        replies += [call(f"call_{t}{k}", command=f"step {k}") for k in range(3)]
        replies.append(ReplySpec(text=f"Task {t + 1} done."))
    return replies


def sdk(served: Served) -> OpenAI:
    return OpenAI(base_url=served.base, api_key="sk-client-key-not-for-upstream",
                  max_retries=0, timeout=30)


def chat_turn(client: OpenAI, messages: list[dict[str, Any]], stream: bool) -> tuple[
        dict[str, Any], Any]:
    """One SDK call; the assistant message as the agent appends it, and the headers."""
    raw = client.chat.completions.with_raw_response.create(
        model="deepseek-flash", messages=messages, tools=[BASH], stream=stream,
        **({"stream_options": {"include_usage": True}} if stream else {}))
    if not stream:
        message = raw.parse().choices[0].message
        return message.model_dump(exclude_none=True), raw.headers
    text, calls, usage = [], {}, None
    for chunk in raw.parse():
        usage = chunk.usage or usage
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            for frag in choice.delta.tool_calls or ():
                slot = calls.setdefault(frag.index, {"id": "", "type": "function",
                                                     "function": {"name": "", "arguments": ""}})
                slot["id"] = frag.id or slot["id"]
                slot["function"]["name"] += frag.function.name or ""
                slot["function"]["arguments"] += frag.function.arguments or ""
    assert usage is not None and usage.prompt_tokens > 0
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if calls:
        message["tool_calls"] = [calls[k] for k in sorted(calls)]
    return message, raw.headers


@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_sdk_runs_a_chat_tool_loop_through_the_proxy(serve, stream: bool) -> None:
    served = serve(script=script(), window=6000)
    client = sdk(served)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    actions, sessions = [], set()
    for task in TASKS:
        messages.append({"role": "user", "content": task})
        while True:
            message, headers = chat_turn(client, messages, stream)
            actions.append(headers["x-ctxfold-action"])
            sessions.add(headers["x-ctxfold-session"])
            messages.append(message)
            names = [c["function"]["name"] for c in message.get("tool_calls", [])]
            assert USE_CAPABILITY not in names
            if not names:
                break
            for c in message["tool_calls"]:
                messages.append({"role": "tool", "tool_call_id": c["id"],
                                 "content": log_text(3000, c["id"])})
    assert "summary" in actions and len(sessions) == 1
    session = sessions.pop()
    canonical = served.canonical(session)
    plan = reconcile(canonical, to_messages(messages))
    assert plan.extends and plan.matched == len(messages)
    assert sum(1 for m in canonical if any(c.name == USE_CAPABILITY for c in m.tool_calls)) == 2
    # Every message the client itself sent is in the transcript byte for byte.
    sent = [m for m in messages if m["role"] != "assistant"]
    kept = [ctxfold.message_to_openai(m, local_fields=False) for m in canonical
            if m.role != "assistant" and m.name != USE_CAPABILITY]
    assert kept == sent
    assert {json.loads(b).get("stream", False) for b in served.bodies} == {stream}
    assert len(json.loads(served.bodies[-1])["messages"]) < len(messages) - 1
    assert extends_between_installs(served.bodies) >= 5


def responses_turn(client: OpenAI, items: list[dict[str, Any]], stream: bool) -> tuple[
        list[dict[str, Any]], Any]:
    raw = client.responses.with_raw_response.create(
        model="gpt-5.5", instructions=SYSTEM, input=items, tools=[BASH_RESPONSES],
        store=False, stream=stream)
    if not stream:
        response = raw.parse()
    else:
        kinds, response = [], None
        for event in raw.parse():
            kinds.append(event.type)
            if event.type == "response.completed":
                response = event.response
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert response is not None
    assert response.usage is not None and response.usage.input_tokens > 0
    assert [t.name for t in response.tools] == ["bash"]  # the client's tools, as sent
    return [i.model_dump(exclude_none=True) for i in response.output], raw.headers


@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_sdk_runs_a_responses_tool_loop_through_the_proxy(serve,
                                                                     stream: bool) -> None:
    served = serve("responses", script=script(), window=6000)
    client = sdk(served)
    items: list[dict[str, Any]] = []
    actions = []
    for task in TASKS:
        items.append({"role": "user", "content": task})
        while True:
            output, headers = responses_turn(client, items, stream)
            actions.append(headers["x-ctxfold-action"])
            items.extend(output)
            calls = [i for i in output if i["type"] == "function_call"]
            assert all(c["name"] == "bash" for c in calls)
            if not calls:
                break
            for c in calls:
                items.append({"type": "function_call_output", "call_id": c["call_id"],
                              "output": log_text(3000, c["call_id"])})
    assert "summary" in actions
    assert extends_between_installs(served.bodies, "input") >= 5
    session = headers["x-ctxfold-session"]
    history = [ctxfold.Message(role="system", content=SYSTEM), *to_messages(items)]
    plan = reconcile(served.canonical(session), history)
    assert plan.extends and plan.matched == len(history)
