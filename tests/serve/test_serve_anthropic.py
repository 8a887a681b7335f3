"""The official Anthropic Python SDK against ``ctxfold serve``'s ``/v1/messages``, with a
Chat Completions upstream (the emulator): streaming and not, a tool loop through several
checkpoints whose ``cache_control`` marks move every turn (as Claude Code's do) without
forking, ``use_capability`` answered by the proxy, the client's ``x-api-key`` forwarded,
errors in Anthropic's shape as the SDK's exception classes, ``count_tokens``."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from tests.serve.conftest import HeaderEmulator, Served, call, log_text

import ctxfold
from ctxfold import Fault, ReplySpec
from ctxfold.interop.anthropic import from_anthropic
from ctxfold.serve.sessions import USE_CAPABILITY, reconcile

SYSTEM = "You are a coding agent."
TASKS = ("Find the bug.", "Fix it.", "Write the test.")
BASH = {"name": "bash", "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                         "required": ["command"]}}
SECRET = "sk-ant-client-5e1c9a7b3d2f4e6a8b0c"
MARK = {"type": "ephemeral"}


def script(per_task: int = 5) -> list[ReplySpec]:
    """Per task: a bash call, a use_capability call (answered by the proxy), more bash
    calls, the answer."""
    replies: list[ReplySpec] = []
    for t in range(len(TASKS)):
        replies += [call(f"call_{t}a", command="ls"),
                    call(f"cap_{t}", USE_CAPABILITY, action="list")]
        replies += [call(f"call_{t}{k}", command=f"step {k}") for k in range(per_task)]
        replies.append(ReplySpec(text=f"Task {t + 1} done."))
    return replies


def client_of(served: Served, key: str = SECRET, **options: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=served.server.base_url, api_key=key, max_retries=0,
                               timeout=30, **options)


def marked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history as Claude Code sends it: a ``cache_control`` mark on the last block of
    the newest message only, so the mark moves to another block every turn."""
    out = copy.deepcopy(messages)
    last = out[-1]
    if isinstance(last["content"], str):
        last["content"] = [{"type": "text", "text": last["content"]}]
    last["content"][-1]["cache_control"] = MARK
    return out


def turn(client: anthropic.Anthropic, messages: list[dict[str, Any]], stream: bool,
         **fields: Any) -> tuple[Any, httpx.Headers]:
    """One SDK call with the marks moved; the final message and the response headers."""
    request: dict[str, Any] = {
        "model": "claude-sonnet-4-6", "max_tokens": 1024, "messages": marked(messages),
        "system": [{"type": "text", "text": SYSTEM, "cache_control": MARK}],
        "tools": [BASH], **fields}
    if not stream:
        raw = client.messages.with_raw_response.create(**request)
        return raw.parse(), raw.headers
    with client.messages.stream(**request) as events:
        kinds = [event.type for event in events]
        message = events.get_final_message()
        headers = events.response.headers
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    assert "message_delta" in kinds
    return message, headers


def loop(served: Served, stream: bool, client: anthropic.Anthropic | None = None,
         tool_size: int = 3000) -> tuple[list[dict[str, Any]], list[Any], list[Any]]:
    """An agent's tool loop: the whole history resent every turn."""
    client = client or client_of(served)
    messages: list[dict[str, Any]] = []
    headers, replies = [], []
    for task in TASKS:
        messages.append({"role": "user", "content": task})
        while True:
            message, head = turn(client, messages, stream)
            headers.append(head)
            replies.append(message)
            blocks = [b.model_dump(exclude_none=True) for b in message.content]
            messages.append({"role": "assistant", "content": blocks})
            calls = [b for b in blocks if b["type"] == "tool_use"]
            assert all(c["name"] == "bash" for c in calls)
            if not calls:
                assert message.stop_reason == "end_turn"
                break
            assert message.stop_reason == "tool_use"
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": c["id"],
                 "content": log_text(tool_size, c["id"])} for c in calls]})
    return messages, headers, replies


@pytest.mark.parametrize("stream", [False, True])
def test_the_anthropic_sdk_runs_a_tool_loop_through_three_checkpoints(serve,
                                                                      stream: bool) -> None:
    served = serve(script=script(), window=5000)
    messages, headers, replies = loop(served, stream)
    actions = [h["x-ctxfold-action"] for h in headers]
    sessions = {h["x-ctxfold-session"] for h in headers}
    # The marks moved every turn and the history never forked: one session, no fork.
    assert len(sessions) == 1
    session = sessions.pop()
    assert not [p for p in served.root.glob("*.jsonl") if "-fork-" in p.name]
    assert actions.count("summary") >= 3, actions
    canonical = served.canonical(session)
    history = from_anthropic([{"type": "text", "text": SYSTEM}], messages)
    plan = reconcile(canonical, history)
    assert plan.extends and plan.matched == len(history)
    # use_capability was answered by the proxy: in the transcript, never shown to the SDK.
    assert sum(1 for m in canonical for c in m.tool_calls if c.name == USE_CAPABILITY) == 3
    # The upstream (Chat Completions) got ctxfold's view with the converted fields and
    # tools, and not one cache_control mark.
    for body in map(json.loads, served.bodies):
        assert body["max_tokens"] == 1024 and body.get("stream", False) is stream
        assert body["tools"][0]["function"]["name"] == "bash"
        assert "cache_control" not in json.dumps(body)
        assert body["messages"][0] == {"role": "system", "content": SYSTEM}
    assert len(json.loads(served.bodies[-1])["messages"]) < len(history)
    # Usage in Anthropic's terms: the emulator's prompt-cache hits are cache reads.
    usage = [r.usage for r in replies]
    assert all(u.input_tokens > 0 and u.output_tokens > 0 for u in usage)
    assert any(u.cache_read_input_tokens for u in usage)


def test_a_text_answer_streams_as_anthropic_events(serve) -> None:
    served = serve(script=[ReplySpec(text="hello there", reasoning="thinking first")])
    events: list[tuple[str, Any]] = []
    with httpx.stream("POST", served.server.base_url + "/v1/messages", json={
            "model": "m", "max_tokens": 64, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]},
            headers={"x-api-key": SECRET}, timeout=30) as response:
        assert response.status_code == 200
        name = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                assert data["type"] == name
                events.append((name, data))
    kinds = [k for k, _ in events]
    assert kinds == ["message_start", "content_block_start", "content_block_delta",
                     "content_block_stop", "content_block_start", "content_block_delta",
                     "content_block_stop", "message_delta", "message_stop"]
    assert events[1][1]["content_block"]["type"] == "thinking"
    assert events[2][1]["delta"] == {"type": "thinking_delta", "thinking": "thinking first"}
    assert events[5][1]["delta"] == {"type": "text_delta", "text": "hello there"}
    assert events[7][1]["delta"]["stop_reason"] == "end_turn"
    assert events[7][1]["usage"]["input_tokens"] > 0


@pytest.mark.parametrize("header", ["x-api-key", "authorization"])
def test_the_clients_key_goes_upstream_and_nowhere_else(
        serve, tmp_path: Path, caplog: pytest.LogCaptureFixture, header: str) -> None:
    caplog.set_level(logging.DEBUG)
    emu = HeaderEmulator("deepseek", script=[ReplySpec(text="done")],
                      faults=[Fault("rate_limit", at=1)])
    served = serve(emulator=emu, api_key=None)
    # The SDK sends an API key as x-api-key, an auth token (ANTHROPIC_AUTH_TOKEN, as
    # Claude Code does) as Authorization: Bearer.
    client = client_of(served) if header == "x-api-key" else anthropic.Anthropic(
        base_url=served.server.base_url, auth_token=SECRET, max_retries=0, timeout=30)
    message = client.messages.create(model="m", max_tokens=64,
                                     messages=[{"role": "user", "content": "go"}])
    assert message.content[0].text == "done"
    with pytest.raises(anthropic.RateLimitError) as refused:
        client.messages.create(model="m", max_tokens=64,
                               messages=[{"role": "user", "content": "again"}])
    assert refused.value.body["type"] == "error"
    assert refused.value.body["error"]["type"] == "rate_limit_error"
    nokey = httpx.post(served.server.base_url + "/v1/messages", json={
        "model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]},
        timeout=10)
    assert nokey.status_code == 401 and nokey.json()["error"]["type"] == \
        "authentication_error"
    assert "x-api-key" in nokey.json()["error"]["message"]
    assert emu.keys[:2] == [f"Bearer {SECRET}"] * 2  # the chat upstream takes a bearer
    served.server.stop()
    served.emu.stop()
    written = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert SECRET.encode() not in written
    assert SECRET not in caplog.text
    assert SECRET not in json.dumps(refused.value.body) + nokey.text


def test_a_proxy_key_is_accepted_as_x_api_key(serve, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXFOLD_SERVE_KEY", "proxy-key-123")
    served = serve(script=[ReplySpec(text="ok")])
    with pytest.raises(anthropic.AuthenticationError) as denied:
        client_of(served, key="guess").messages.create(
            model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    assert denied.value.body["error"]["type"] == "authentication_error"
    answer = client_of(served, key="proxy-key-123").messages.create(
        model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    assert answer.content[0].text == "ok"


def test_bad_requests_are_anthropic_errors_naming_the_place(serve) -> None:
    served = serve(script=[ReplySpec(text="ok")])
    client = client_of(served)
    with pytest.raises(anthropic.BadRequestError) as empty:
        client.messages.create(model="m", max_tokens=8, messages=[])
    assert empty.value.body["type"] == "error"
    assert empty.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError) as broken:
        client.messages.create(model="m", max_tokens=8, messages=[
            {"role": "user", "content": "fine"},
            {"role": "assistant", "content": [{"type": "text", "text": 3}]}])
    assert "messages[1].content[0]" in broken.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as reserved:
        client.messages.create(model="m", max_tokens=8, tools=[{**BASH, "name": USE_CAPABILITY}],
                               messages=[{"role": "user", "content": "x"}])
    assert USE_CAPABILITY in reserved.value.body["error"]["message"]
    # The guard's refusals on this route are Anthropic-shaped too.
    wrong = httpx.post(served.server.base_url + "/v1/messages", content=b"{}",
                       headers={"Content-Type": "text/plain"}, timeout=10)
    assert wrong.status_code == 415 and wrong.json()["type"] == "error"


def test_upstream_failures_are_the_sdks_exception_classes(serve) -> None:
    served = serve(script=[ReplySpec(text="ok")] * 3,
                   faults=[Fault("overloaded", at=0), Fault("malformed", at=1)])
    client = client_of(served)
    request: dict[str, Any] = {"model": "m", "max_tokens": 8,
                               "messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(anthropic.InternalServerError) as overloaded:
        client.messages.create(**request)
    assert overloaded.value.body["error"]["type"] == "api_error"
    with pytest.raises(anthropic.APIStatusError) as malformed:
        client.messages.create(**request)
    assert malformed.value.status_code == 502
    assert malformed.value.body["error"]["type"] == "api_error"


def test_count_tokens_counts_what_would_be_sent_after_the_checkpoints(serve) -> None:
    served = serve(script=script(), window=5000)
    messages, headers, _replies = loop(served, stream=False)
    assert "summary" in [h["x-ctxfold-action"] for h in headers]
    client = client_of(served)
    request: dict[str, Any] = {"model": "claude-sonnet-4-6", "system": SYSTEM,
                               "tools": [BASH]}
    folded = client.messages.count_tokens(messages=marked(messages), **request)
    # The same history under another opening: no checkpoint covers it.
    other = [{"role": "user", "content": "Find the other bug."}, *messages[1:]]
    whole = client.messages.count_tokens(messages=marked(other), **request)
    assert 0 < folded.input_tokens < whole.input_tokens
    sessions = {p.name for p in served.root.glob("*.jsonl")}
    assert len(sessions) == 1  # counting routed nothing
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(messages=[], **request)


def test_an_anthropic_request_is_translated_for_a_chat_upstream(serve) -> None:
    served = serve(script=[ReplySpec(text="ok")])
    raw = client_of(served).messages.with_raw_response.create(
        model="m", max_tokens=8, system=SYSTEM, stop_sequences=["END"],
        output_config={"effort": "low"}, tool_choice={"type": "any",
                                                      "disable_parallel_tool_use": True},
        tools=[BASH, {"type": "web_search_20250305", "name": "web_search"}],
        extra_body={"temperature": 0.5},  # the SDK 2.10 has no argument for it
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBORw0KGgo="}}]}])
    assert raw.parse().content[0].text == "ok"
    # The server tool has no chat form: left out, and named.
    assert raw.headers["x-ctxfold-dropped-tools"] == "web_search_20250305:web_search"
    body = json.loads(served.bodies[-1])
    assert [t["function"]["name"] for t in body["tools"]] == ["bash"]
    assert body["tool_choice"] == "required" and body["parallel_tool_calls"] is False
    assert body["stop"] == ["END"] and body["temperature"] == 0.5
    assert body["reasoning_effort"] == "low"
    assert body["messages"][1]["content"][1] == {
        "type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


def test_a_resent_anthropic_history_is_read_from_where_it_differs() -> None:
    """The proxy re-reads only the messages that changed (a moved mark is a change of the
    dict, not of the message); what it reads must equal a full read."""
    from ctxfold.serve.client_request import RecentHistories, parse_request
    from ctxfold.serve.sessions import chain_of, key_digest

    base: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": "sig=="},
            {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "a b"},
            {"type": "text", "text": "and then?"}]}]
    recent = RecentHistories()
    env = {"role": "system", "content": "cwd: /work"}  # mid-conversation, as Claude Code
    bodies = [base, [*base, {"role": "assistant", "content": "done"}],
              [base[0], {"role": "assistant", "content": "other"}],
              [*base, {"role": "assistant", "content": "done"},
               {"role": "user", "content": "more"}],
              [base[0], env, *base[1:]], [base[0], env, *base[1:], env]]
    for messages in bodies:
        body = {"model": "m", "system": [{"type": "text", "text": SYSTEM, "cache_control": MARK}],
                "messages": marked(messages)}
        fast = parse_request("messages", json.loads(json.dumps(body)), recent)
        full = parse_request("messages", json.loads(json.dumps(body)))
        assert fast.history == full.history and len(fast.history) > len(messages)
        assert list(fast.chain) == chain_of([key_digest(m) for m in full.history])
    bad = {"model": "m", "messages": [*base, {"role": "user", "content": [{"type": 3}]}]}
    with pytest.raises(ctxfold.CtxfoldError, match=r"messages\[3\]\.content\[0\]"):
        parse_request("messages", bad, recent)


def test_a_stream_that_fails_midway_ends_with_an_anthropic_error_event(serve) -> None:
    served = serve(faults=[Fault("stall", at=0, interval=0.1, stall_cap=1.0)], keepalive=0.2)
    seen: list[str] = []
    request: dict[str, Any] = {"model": "m", "max_tokens": 64,
                               "messages": [{"role": "user", "content": "hi"}]}
    # The SDK raises on the error event.
    with pytest.raises(anthropic.APIStatusError) as failed, \
            client_of(served).messages.stream(**request) as stream:
        seen.extend(event.type for event in stream)
    assert seen[:1] == ["message_start"]  # the stream had started: the error came as an event
    assert failed.value.body["type"] == "error"
    assert failed.value.body["error"]["type"] in ("api_error", "timeout_error")


@pytest.mark.parametrize("profile", ["deepseek", "anthropic"])
def test_a_mid_conversation_system_message_is_read_as_claude_code_sends_it(serve,
                                                                          profile: str) -> None:
    """Claude Code puts its environment in a ``role: "system"`` message after the first user
    message: a list with a marked text block while it is the newest, a string afterwards."""
    served = serve(profile, script=[call("t1", command="ls"), ReplySpec(text="done")])
    client = client_of(served)
    env = "<env>cwd: /work</env>"
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"role": "system", "content": [{"type": "text", "text": env, "cache_control": MARK}]}]
    first = client.messages.with_raw_response.create(
        model="claude-sonnet-4-6", max_tokens=64, tools=[BASH], messages=history)
    blocks = [b.model_dump(exclude_none=True) for b in first.parse().content]
    history[1] = {"role": "system", "content": env}
    history += [{"role": "assistant", "content": blocks},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                              "content": "a b"}]}]
    second = client.messages.with_raw_response.create(
        model="claude-sonnet-4-6", max_tokens=64, tools=[BASH], messages=marked(history))
    assert second.parse().content[0].text == "done"
    assert first.headers["x-ctxfold-session"] == second.headers["x-ctxfold-session"]
    canonical = served.canonical(second.headers["x-ctxfold-session"])
    assert [m.role for m in canonical] == ["user", "system", "assistant", "tool", "assistant"]
    body = json.loads(served.bodies[-1])
    if profile == "deepseek":  # a chat upstream takes a system message anywhere
        assert body["messages"][1] == {"role": "system", "content": env}
    else:  # an Anthropic upstream gets it as user text, which every model takes
        assert body["messages"][1]["role"] == "user"
        assert body["messages"][1]["content"][0]["text"] == env
