"""OpenAI chat-format interop and the transcript converter are lossless for known fields."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxfold import (
    Message,
    MessageError,
    ToolCall,
    ToolSchema,
    message_from_openai,
    message_to_openai,
)
from ctxfold.interop.chat import tool_schema_from_openai, tool_schema_to_openai
from ctxfold.kernel.codec import dumps_message, message_from_dict, message_to_dict

text = st.text(max_size=50)
calls = st.lists(st.builds(ToolCall, id=text, name=text, arguments=text), max_size=3)
messages = st.builds(
    Message,
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    content=text,
    raw_content=st.none() | text,
    tool_calls=calls.map(tuple),
    tool_call_id=st.none() | text,
    name=st.none() | text,
    reasoning_content=st.none() | text,
    origin=st.sampled_from(["user", "host"]),
    local_only=st.booleans(),
    partial=st.booleans(),
    created_at=text,
    id=text,
)


@given(messages)
def test_openai_round_trip_is_lossless(message: Message) -> None:
    assert message_from_openai(message_to_openai(message)) == message


@given(messages)
def test_transcript_line_round_trip(message: Message) -> None:
    line = dumps_message(message)
    assert "\n" not in line
    assert message_from_dict(json.loads(line)) == message


def test_provider_form_has_only_visible_fields() -> None:
    m = Message(role="tool", content="short", raw_content="long", tool_call_id="c1",
                name="bash", origin="host", local_only=True, id="x")
    assert message_to_openai(m, local_fields=False) == {
        "role": "tool", "content": "short", "tool_call_id": "c1", "name": "bash"}


def test_defaults_are_omitted_in_transcript_lines() -> None:
    assert message_to_dict(Message(role="user", content="hi")) == {"role": "user", "content": "hi"}


def test_openai_dict_forms() -> None:
    m = message_from_openai({
        "role": "assistant",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        "tool_calls": [{"id": "c", "type": "function",
                        "function": {"name": "f", "arguments": {"x": 1}}}],
    })
    # Parts are kept as given (not joined: that changed the host's bytes); text reads them.
    assert m.content == "" and m.text == "a\nb"
    assert m.parts == ('{"type":"text","text":"a"}', '{"type":"text","text":"b"}')
    assert m.tool_calls == (ToolCall(id="c", name="f", arguments='{"x":1}'),)
    developer = message_from_openai({"role": "developer", "content": "s"})
    assert developer.role == "system" and message_to_openai(developer)["role"] == "developer"
    flat = message_from_openai({"role": "assistant", "content": [{"type": "text", "text": "a"}]},
                               lossless=False)
    assert flat.content == "a" and not flat.parts


@pytest.mark.parametrize(
    ("data", "reason"),
    [({"role": "wizard"}, "unknown role"), ("text", "expected an object"),
     ({"role": "user", "content": 5}, r"messages\[3\]\.content: must be"),
     ({"role": "assistant", "tool_calls": [{"id": "c"}]}, "missing 'function'")],
)
def test_bad_dicts_name_the_problem(data, reason) -> None:
    with pytest.raises(MessageError, match=reason):
        message_from_openai(data, where="messages[3]")


def test_tool_schema_round_trip() -> None:
    tool = ToolSchema(name="bash", description="run", parameters={"type": "object"})
    assert tool_schema_from_openai(tool_schema_to_openai(tool)) == tool


@pytest.mark.parametrize(
    "line",
    [{"role": "user", "content": 5}, {"role": "user", "local_only": "no"},
     {"role": "user", "content": "x", "tool_calls": [{"id": 1, "name": "f"}]}],
)
def test_transcript_lines_are_structured_strictly(line, tmp_path) -> None:
    from ctxfold import StoreError
    from ctxfold.plugins.stores.fs import FsStore

    with pytest.raises(Exception):  # noqa: B017 - cattrs' ClassValidationError
        message_from_dict(line)
    store = FsStore(tmp_path)
    store.create("s")
    good = dumps_message(Message(role="user", content="ok"))
    (tmp_path / "s.jsonl").write_text(good + "\n" + json.dumps(line) + "\n" + good + "\n")
    with pytest.raises(StoreError, match="line 2"):
        store.load("s")
