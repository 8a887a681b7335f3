"""``cm.append()`` takes the official ``anthropic`` SDK's objects as its users write them
(issue-28 review, finding 3): the response's ``content`` list of pydantic blocks, the
``anthropic.types.Message`` itself, and ``MessageParam`` dicts — and a tool loop written the
SDK's way (https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use:
append ``{"role": "assistant", "content": response.content}``, then a user message of
``tool_result`` blocks) goes out as the SDK would send it. No network: the SDK's types only,
and the emulator on 127.0.0.1 for the request the API would take."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from anthropic.types import Message as SdkMessage
from anthropic.types import MessageParam, ToolResultBlockParam, message_create_params
from pydantic import TypeAdapter
from tests.conftest import make_config

import ctxfold
from ctxfold import Emulator, Message, ProviderOptions, ReplySpec, ToolCall
from ctxfold.interop.anthropic import to_anthropic
from ctxfold.interop.coerce import to_messages
from ctxfold.kernel.config import ProviderConfig

BLOCKS: list[dict[str, Any]] = [
    {"type": "thinking", "thinking": "List the files.", "signature": "SIG=="},
    {"type": "text", "text": "Listing."},
    {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}]
#: What the SDK sends for these blocks (its own params, unset fields left out).
SENT = [{"signature": "SIG==", "thinking": "List the files.", "type": "thinking"},
        {"text": "Listing.", "type": "text"},
        {"id": "toolu_1", "input": {"command": "ls"}, "name": "bash", "type": "tool_use"}]


def response(blocks: list[dict[str, Any]] = BLOCKS) -> SdkMessage:
    return SdkMessage.model_validate({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
        "content": blocks, "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5}})


RESULT: MessageParam = {"role": "user", "content": [ToolResultBlockParam(
    type="tool_result", tool_use_id="toolu_1", content="a.py\nb.py")]}


@pytest.mark.parametrize("form", ["content list", "Message", "MessageParam"])
def test_an_sdk_reply_appends_as_one_assistant_message(form: str) -> None:
    reply = response()
    # MessageParam dicts, as the SDK's typed users build them
    param = {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                              for b in reply.content]}
    value: Any = {"Message": reply, "MessageParam": param,
                  "content list": {"role": "assistant", "content": reply.content}}[form]
    [user, assistant, *results] = to_messages(
        [{"role": "user", "content": "What is here?"}, value, RESULT])
    assert user == Message(role="user", content="What is here?")
    assert assistant.role == "assistant" and assistant.content == "Listing."
    assert assistant.reasoning_content == "List the files."
    assert assistant.tool_calls == (ToolCall(id="toolu_1", name="bash",
                                             arguments='{"command":"ls"}'),)
    assert [(m.role, m.tool_call_id, m.content) for m in results] == [
        ("tool", "toolu_1", "a.py\nb.py")]
    _, sent = to_anthropic([user, assistant, *results])
    assert sent == [{"role": "user", "content": "What is here?"},
                    {"role": "assistant", "content": SENT},
                    {"role": "user", "content": [{"type": "tool_result",
                                                  "tool_use_id": "toolu_1",
                                                  "content": "a.py\nb.py"}]}]


def test_a_text_only_sdk_reply_appends_as_text() -> None:
    reply = response([{"type": "text", "text": "All done."}])
    for value in (reply, {"role": "assistant", "content": reply.content}):
        [message] = to_messages([value])
        assert (message.role, message.content, message.tool_calls) == ("assistant",
                                                                        "All done.", ())
        assert to_anthropic([message])[1][0]["content"] in ("All done.", [
            {"text": "All done.", "type": "text"}])


@pytest.mark.parametrize("as_message", [False, True])
def test_an_sdk_tool_loop_goes_out_through_prepare(tmp_path: Path, as_message: bool) -> None:
    config = attrs.evolve(make_config(tmp_path), provider=ProviderConfig(name="anthropic"))
    cm = ctxfold.open_session("sdk-loop", config=config)
    cm.append({"role": "user", "content": "What is here?"})
    reply = response()
    cm.append(reply if as_message else {"role": "assistant", "content": reply.content})
    cm.append(RESULT)
    system, messages = to_anthropic(cm.prepare().messages)
    assert messages[1] == {"role": "assistant", "content": SENT}
    assert messages[2]["content"][0]["tool_use_id"] == "toolu_1"
    body = {"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": messages,
            **({"system": system} if system else {})}
    TypeAdapter(message_create_params.MessageCreateParamsNonStreaming).validate_python(
        json.loads(json.dumps(body)))
    with Emulator("anthropic", script=[ReplySpec(text="Two files.")]) as emu, \
            ctxfold.create_provider(config, options=ProviderOptions(
                base_url=emu.base_url, api_key="k", max_retries=0)) as provider:
        assert cm.complete(provider).message.content == "Two files."
