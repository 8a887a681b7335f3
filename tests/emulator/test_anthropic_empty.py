"""Empty assistant replies toward the emulator's ``anthropic`` profile (issue-28 review,
finding 2). Claude may answer with no content (``content: []``) or one empty text block;
the API refuses both when they are sent back — "all messages must have non-empty content
except for the optional final assistant message" and "text content blocks must be
non-empty" (https://github.com/anthropics/claude-code/issues/3196,
https://github.com/anthropics/claude-code/issues/6774) — and the profile refuses them the
same way. The transcript keeps them as received; only the wire form leaves them out."""

from __future__ import annotations

from pathlib import Path

import attrs
import httpx
import pytest
from tests.conftest import make_config

import ctxfold
from ctxfold import ChatRequest, Emulator, Message, ProviderOptions, ReplySpec, ToolCall
from ctxfold.interop.anthropic import from_anthropic, to_anthropic
from ctxfold.kernel.config import ProviderConfig

HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


def post(emu: Emulator, messages: list[dict[str, object]]) -> httpx.Response:
    return httpx.post(emu.base_url + "/v1/messages", headers=HEADERS, timeout=10, json={
        "model": "claude-sonnet-4-6", "max_tokens": 64, "messages": messages})


@pytest.mark.parametrize("content", [
    [],
    [{"type": "text", "text": ""}],
    [{"type": "text", "text": ""}, {"type": "text", "text": ""}],
])
def test_an_empty_assistant_turn_is_not_sent_back(content: list[dict[str, str]]) -> None:
    stored = [Message(role="user", content="hi"),
              *from_anthropic(None, [{"role": "assistant", "content": content}]),
              Message(role="user", content="again")]
    kept = list(stored)
    with Emulator("anthropic", script=[ReplySpec(text="ok")]) as emu:
        _, messages = to_anthropic(stored)
        answer = post(emu, messages)
    assert answer.status_code == 200, answer.text
    assert all(m["role"] == "user" for m in messages)
    assert stored == kept  # the messages themselves are untouched


def test_empty_text_blocks_beside_a_tool_call_are_left_out() -> None:
    stored = [Message(role="user", content="list"),
              *from_anthropic(None, [
                  {"role": "assistant", "content": [
                      {"type": "text", "text": ""},
                      {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}]},
                  {"role": "user", "content": [
                      {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"}]}]),
              Message(role="assistant", content="",
                      tool_calls=(ToolCall(id="toolu_2", name="ls", arguments="{}"),)),
              Message(role="tool", tool_call_id="toolu_2", content="b.py")]
    with Emulator("anthropic", script=[ReplySpec(text="ok")]) as emu:
        _, messages = to_anthropic(stored)
        answer = post(emu, messages)
    assert answer.status_code == 200, answer.text
    assert messages[1]["content"] == [{"type": "tool_use", "id": "toolu_1", "name": "ls",
                                       "input": {}}]
    assert messages[3]["content"] == [{"type": "tool_use", "id": "toolu_2", "name": "ls",
                                       "input": {}}]


@pytest.mark.parametrize("stream", [True, False])
def test_provider_round_trip_after_an_empty_reply(stream: bool) -> None:
    """The provider assembles the empty reply and sends the next request without it."""
    with Emulator("anthropic", script=[ReplySpec(text=""), ReplySpec(text="ok")]) as emu:
        config = attrs.evolve(make_config(Path(".")), provider=ProviderConfig(name="anthropic"))
        with ctxfold.create_provider(config, options=ProviderOptions(
                base_url=emu.base_url, api_key="k", max_retries=0)) as provider:
            first = provider.complete(ChatRequest(
                messages=(Message(role="user", content="hi"),), stream=stream))
            assert first.message.content == "" and first.finish_reason == "stop"
            second = provider.complete(ChatRequest(messages=(
                Message(role="user", content="hi"), first.message,
                Message(role="user", content="again")), stream=stream))
    assert second.message.content == "ok"


def test_a_session_goes_on_after_an_empty_reply(tmp_path: Path) -> None:
    with Emulator("anthropic", script=[ReplySpec(text=""), ReplySpec(text="ok")]) as emu:
        config = attrs.evolve(make_config(tmp_path), provider=ProviderConfig(name="anthropic"))
        with ctxfold.create_provider(config, options=ProviderOptions(
                base_url=emu.base_url, api_key="k", max_retries=0)) as provider:
            cm = ctxfold.open_session("empty", config=config)
            cm.append({"role": "user", "content": "hi"})
            assert cm.complete(provider).message.content == ""
            cm.append({"role": "user", "content": "please answer"})
            assert cm.complete(provider).message.content == "ok"
    # the empty reply stays in the transcript as received
    assert [m.role for m in cm.canonical] == ["user", "assistant", "user", "assistant"]
    assert cm.canonical[1].content == ""
