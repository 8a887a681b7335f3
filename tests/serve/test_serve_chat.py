"""Chat Completions through ``ctxfold serve``: a multi-turn tool loop, streaming and not,
reaches a checkpoint; the upstream is sent ctxfold's view, byte-stable between installs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.serve.conftest import BASH, Served, call, log_text

from ctxfold import ReplySpec
from ctxfold.interop.coerce import to_messages
from ctxfold.serve.sessions import reconcile
from ctxfold.transport.provider import serialize_body

SYSTEM = "You are a coding agent."
TASKS = ("Find the bug.", "Fix it.")
SUMMARY_MARK = "[ctxfold:summary-request]"


def script(per_task: int = 5) -> list[ReplySpec]:
    replies: list[ReplySpec] = []
    for t in range(len(TASKS)):
        replies += [call(f"call_{t}{k}", command=f"step {k}") for k in range(per_task)]
        replies.append(ReplySpec(text=f"Task {t + 1} done."))
    return replies


def assemble(events: list[tuple[str, Any]]) -> dict[str, Any]:
    """The assistant message a client builds from chat chunks."""
    text, calls = [], {}
    for _name, data in events:
        if data == "[DONE]":
            continue
        for choice in data.get("choices") or ():
            delta = choice["delta"]
            text.append(delta.get("content") or "")
            for frag in delta.get("tool_calls") or ():
                slot = calls.setdefault(frag["index"], {"id": "", "type": "function",
                                                        "function": {"name": "",
                                                                     "arguments": ""}})
                slot["id"] = frag.get("id") or slot["id"]
                fn = frag.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [calls[k] for k in sorted(calls)]
    return message


def chat_loop(served: Served, *, stream: bool, tool_size: int = 3000,
              **headers: str) -> tuple[list[dict[str, Any]], list[Any]]:
    """An agent's loop: the whole history resent every turn, tool results appended."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    answers: list[Any] = []
    for task in TASKS:
        messages.append({"role": "user", "content": task})
        while True:
            body = {"model": "deepseek-flash", "messages": messages, "tools": [BASH],
                    "temperature": 0.2}
            if stream:
                body["stream_options"] = {"include_usage": True}
                response, events = served.stream("/chat/completions", body, **headers)
                assert response.status_code == 200, events
                message = assemble(events)
                answers.append((response, events))
            else:
                response = served.post("/chat/completions", body, **headers)
                assert response.status_code == 200, response.text
                message = response.json()["choices"][0]["message"]
                answers.append(response)
            messages.append(message)
            if not message.get("tool_calls"):
                break
            for c in message["tool_calls"]:
                messages.append({"role": "tool", "tool_call_id": c["id"],
                                 "content": log_text(tool_size, c["id"])})
    return messages, answers


def head(body: bytes, field: str = "messages") -> bytes:
    """``{"model":…,"<field>":[…]`` of a body: what the next body must extend."""
    data = json.loads(body)
    return serialize_body({"model": data["model"], field: data[field]})[:-1]


def assert_byte_stable(bodies: list[bytes], actions: list[str], field: str = "messages") -> int:
    """Between installs every body extends the previous body's history bytes; returns how
    many consecutive pairs were checked."""
    checked = 0
    for previous, body, action in zip(bodies, bodies[1:], actions[1:], strict=False):
        assert body.startswith(head(body, field))  # the history right after the model
        if action == "none":
            assert body.startswith(head(previous, field)[:-1] + b","), action
            checked += 1
    return checked


def proxy_requests(served: Served) -> list[bytes]:
    """The bodies the emulator received from the proxy itself (summaries left out)."""
    out = []
    for record in served.emu.requests:
        last = (record.body.get("messages") or record.body.get("input") or [{}])[-1]
        if SUMMARY_MARK not in json.dumps(last):
            out.append(serialize_body(record.body))
    return out


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_loop_through_the_proxy_installs_a_checkpoint_and_keeps_every_message(
        serve, stream: bool) -> None:
    served = serve(script=script(), window=6000)
    messages, answers = chat_loop(served, stream=stream)
    responses = [a[0] if stream else a for a in answers]
    sessions = {r.headers["x-ctxfold-session"] for r in responses}
    assert len(sessions) == 1 and next(iter(sessions)).startswith("serve-")
    actions = [r.headers["x-ctxfold-action"] for r in responses]
    assert "summary" in actions
    # The canonical transcript holds every message of the client's history, in order.
    session = sessions.pop()
    plan = reconcile(served.canonical(session), to_messages(messages))
    assert plan.extends and plan.matched == len(to_messages(messages))
    # What went upstream is the view: after the checkpoint, less than the client's history.
    last = json.loads(served.bodies[-1])
    assert len(last["messages"]) < len(messages) - 1
    assert "<compaction-summary>" in json.dumps(last["messages"])
    # The exact bytes sent are what the emulator received, and they are byte-stable.
    assert served.bodies == proxy_requests(served)
    assert assert_byte_stable(served.bodies, actions) >= 5
    for body in map(json.loads, served.bodies):
        assert body["temperature"] == 0.2 and body["model"] == "deepseek-flash"
        assert body["tools"][0]["function"]["name"] == "bash"
        assert body.get("stream", False) is stream


def test_streamed_usage_is_what_the_upstream_reported_for_the_view(serve) -> None:
    served = serve(script=[ReplySpec(text="hello there")])
    body = {"model": "m", "messages": [{"role": "user", "content": "hi " * 200}],
            "stream_options": {"include_usage": True}}
    _response, events = served.stream("/chat/completions", body)
    usage_chunks = [d for _n, d in events if d != "[DONE]" and d.get("usage")]
    assert len(usage_chunks) == 1 and usage_chunks[0]["choices"] == []
    usage = usage_chunks[0]["usage"]
    record = served.emu.requests[-1]
    assert usage["prompt_tokens"] == record.prompt_tokens
    assert usage["completion_tokens"] == record.completion_tokens
    assert usage["prompt_tokens_details"]["cached_tokens"] == record.cache_hit_tokens
    assert events[-1] == ("", "[DONE]")
    # Without include_usage the client gets no usage chunk (clients index choices[0]), but
    # the usage the upstream reported rides on the finish chunk, as DeepSeek sends it (it
    # was dropped: LangChain lost its usage through the proxy).
    _response, events = served.stream("/chat/completions", {
        "model": "m", "messages": [{"role": "user", "content": "again"}]})
    assert all(d == "[DONE]" or d["choices"] for _n, d in events)
    finish = [d for _n, d in events if d != "[DONE]" and d["choices"][0]["finish_reason"]]
    assert finish[-1]["usage"]["prompt_tokens"] == served.emu.requests[-1].prompt_tokens


def test_tool_results_are_bounded_before_they_go_upstream(serve) -> None:
    served = serve(script=[call("c1"), ReplySpec(text="read it")])
    messages: list[dict[str, Any]] = [{"role": "user", "content": "run it"}]
    first = served.post("/chat/completions", {"model": "m", "messages": messages,
                                               "tools": [BASH]})
    messages.append(first.json()["choices"][0]["message"])
    huge = log_text(60_000, "huge")
    messages.append({"role": "tool", "tool_call_id": "c1", "content": huge})
    second = served.post("/chat/completions", {"model": "m", "messages": messages,
                                                "tools": [BASH]})
    assert second.status_code == 200
    sent = json.loads(served.bodies[-1])["messages"][-1]
    assert sent["role"] == "tool" and len(sent["content"].encode()) <= 32 * 1024
    assert "result_ref=" in sent["content"]
    session = second.headers["x-ctxfold-session"]
    kept = served.canonical(session)[2]
    assert kept.raw_content == huge  # the full text stays in the transcript, pageable
    # The client resends the whole result next turn: that is no divergence.
    messages.append(second.json()["choices"][0]["message"])
    messages.append({"role": "user", "content": "thanks"})
    third = served.post("/chat/completions", {"model": "m", "messages": messages,
                                               "tools": [BASH]})
    assert third.headers["x-ctxfold-session"] == session


@pytest.mark.parametrize("profile", ["deepseek", "responses"])
def test_the_encoded_upstream_body_is_the_body_to_the_byte(serve, profile: str) -> None:
    """The proxy builds each upstream body from per-message JSON it keeps between turns; the
    bytes must be those of the whole body encoded at once."""
    from ctxfold.serve.client_request import parse_request
    from ctxfold.transport.provider import serialize_body

    served = serve(profile, script=[call("c1"), ReplySpec(text="done")], window=6000)
    history: list[dict[str, Any]] = [{"role": "system", "content": "s"},
                                     {"role": "user", "content": "héllo ✓ \\u2028"}]
    first = served.post("/chat/completions", {"model": "m", "messages": history,
                                               "tools": [BASH], "temperature": 0})
    history += [first.json()["choices"][0]["message"],
                {"role": "tool", "tool_call_id": "c1", "content": log_text(40_000)}]
    session = first.headers["x-ctxfold-session"]
    cm = served.proxy.pool.get(session, ())
    for stream in (False, True):
        request = parse_request("chat", {"model": "m", "messages": history, "tools": [BASH],
                                         "stream": stream, "temperature": 0})
        prepared = cm.prepare()
        upstream = served.proxy.upstream
        for _ in range(2):  # the second time from the cache
            assert upstream.encoded(request, prepared, cache_key="k") == serialize_body(
                upstream.body(request, prepared, cache_key="k"))
