"""Anthropic Messages in and out: every block type comes back byte-identical, through a
stored transcript too; tools, usage and breakpoint placement."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from ctxfold import Message, MessageError, ToolCall, ToolSchema
from ctxfold.interop.anthropic import (
    from_anthropic,
    place_breakpoints,
    to_anthropic,
    tool_from_anthropic,
    tool_to_anthropic,
    usage_from_anthropic,
    wire_of,
)
from ctxfold.interop.usage import usage_from
from ctxfold.kernel.codec import message_from_dict, message_to_dict
from ctxfold.kernel.fingerprint import message_fingerprint


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


EPHEMERAL = {"type": "ephemeral", "ttl": "1h"}
PNG = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}
URL_IMAGE = {"type": "image", "source": {"type": "url", "url": "https://example.test/a.png"}}
SYSTEM = [{"type": "text", "text": "You are a coding agent."},
          {"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}]
#: One conversation with every block type the module names.
MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "Fix the bug in a.py"},
    {"role": "user", "content": [{"type": "text", "text": "Here is a screenshot"}, PNG,
                                 URL_IMAGE]},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Read it first.", "signature": "EqQBCkYIBxgCKkD=="},
        {"type": "text", "text": "Reading a.py."},
        {"type": "tool_use", "id": "toolu_01", "name": "read_file",
         "input": {"path": "a.py", "lines": [1, 20], "why": "é ✓"}},
        {"type": "tool_use", "id": "toolu_02", "name": "ls", "input": {}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "def f(): pass"},
        {"type": "tool_result", "tool_use_id": "toolu_02",
         "content": [{"type": "text", "text": "a.py"}, PNG], "is_error": False},
        {"type": "text", "text": "Also check b.py", "cache_control": {"type": "ephemeral"}}]},
    {"role": "assistant", "content": [
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
        {"type": "tool_use", "id": "toolu_03", "name": "run", "input": {"cmd": "pytest"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_03", "content": "1 failed",
         "is_error": True}]},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "one", "signature": "s1"},
        {"type": "thinking", "thinking": "two", "signature": "s2"},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
         "input": {"query": "pytest"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        {"type": "text", "text": "Found it.", "citations": None},
        {"type": "text", "text": "Done."}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_09"}]},
    {"role": "user", "content": []},
    {"role": "assistant", "content": "Plain answer."},
]


def test_every_block_type_comes_back_byte_identical() -> None:
    messages = from_anthropic(SYSTEM, MESSAGES)
    system, sent = to_anthropic(messages)
    assert dumps(system) == dumps(SYSTEM)
    assert dumps(sent) == dumps(MESSAGES)


def test_modeled_fields_are_ctxfold_fields() -> None:
    m = from_anthropic("sys", MESSAGES)
    assert m[0] == Message(role="system", content="sys")
    assert m[1] == Message(role="user", content="Fix the bug in a.py")
    assert m[2].role == "user" and json.loads(m[2].parts[1]) == PNG
    assistant = m[3]
    assert assistant.content == "Reading a.py."
    assert assistant.reasoning_content == "Read it first."
    assert assistant.tool_calls == (
        ToolCall("toolu_01", "read_file", '{"path":"a.py","lines":[1,20],"why":"é ✓"}'),
        ToolCall("toolu_02", "ls", "{}"))
    assert "EqQBCkYIBxgCKkD==" in "".join(assistant.anthropic_blocks)
    tools = [x for x in m if x.role == "tool"]
    assert [t.tool_call_id for t in tools] == ["toolu_01", "toolu_02", "toolu_03", "toolu_09"]
    assert tools[0].content == "def f(): pass" and tools[1].parts and tools[1].content == ""
    assert '"is_error":true' in tools[2].anthropic_blocks[-1]
    # the text after the tool results is a user message of its own, continuing the same
    # Anthropic message (no envelope entry)
    after = m[m.index(tools[1]) + 1]
    assert after.role == "user" and after.content == "Also check b.py"
    assert not any('"role"' in b for b in after.anthropic_blocks)


def test_a_string_system_prompt_goes_out_as_one_text_block() -> None:
    system, sent = to_anthropic(from_anthropic("Be brief.", [{"role": "user",
                                                             "content": "hi"}]))
    assert system == [{"type": "text", "text": "Be brief."}]
    assert sent == [{"role": "user", "content": "hi"}]
    assert to_anthropic(from_anthropic(None, []))[0] == []


def test_stored_transcript_lines_round_trip_every_block() -> None:
    messages = from_anthropic(SYSTEM, MESSAGES)
    again = [message_from_dict(json.loads(json.dumps(message_to_dict(m)))) for m in messages]
    assert again == messages
    assert dumps(to_anthropic(again)[1]) == dumps(MESSAGES)


def test_kept_blocks_are_provider_visible_in_the_fingerprint() -> None:
    a = from_anthropic(None, [MESSAGES[2]])[0]
    b = attrs.evolve(a, anthropic_blocks=tuple(x.replace("EqQBCkYIBxgCKkD==", "other")
                                               for x in a.anthropic_blocks))
    assert message_fingerprint(a) != message_fingerprint(b)


def test_sdk_objects_are_read_like_dicts() -> None:
    reply = anthropic.types.Message.model_validate({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
        "content": [{"type": "thinking", "thinking": "t", "signature": "sig"},
                    {"type": "text", "text": "hi"},
                    {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"a": 1}}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 4, "cache_read_input_tokens": 100,
                  "cache_creation_input_tokens": 20}})
    messages = from_anthropic(None, [{"role": "assistant", "content": reply.content}])
    assert messages[0].content == "hi" and messages[0].reasoning_content == "t"
    assert messages[0].tool_calls == (ToolCall("toolu_1", "ls", '{"a":1}'),)
    usage = usage_from_anthropic(reply.usage)
    assert (usage.prompt_tokens, usage.cache_hit_tokens, usage.cache_miss_tokens,
            usage.cache_write_tokens, usage.completion_tokens) == (123, 100, 23, 20, 4)


def validated(kind: Any, value: Any) -> Any:
    """``value`` checked against the SDK's TypedDict ``kind`` (strictly: an unknown or
    mistyped field fails), its lazily checked iterables consumed."""
    def consumed(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: consumed(x) for k, x in v.items()}
        if isinstance(v, str | bytes | int | float | bool) or v is None:
            return v
        return [consumed(x) for x in v]

    adapter = TypeAdapter(kind)  # alive while the iterables are consumed
    return consumed(adapter.validate_python(value, strict=True))


def test_what_ctxfold_sends_validates_as_the_sdks_message_params() -> None:
    system, sent = to_anthropic(from_anthropic(SYSTEM, MESSAGES[:6]))
    assert validated(list[anthropic.types.MessageParam], sent) == sent
    assert validated(list[anthropic.types.TextBlockParam], system) == system
    with pytest.raises(ValidationError):  # the check can fail
        validated(list[anthropic.types.MessageParam],
                  [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": 5}]}])


@pytest.mark.parametrize(("system", "messages", "where"), [
    (None, [{"role": "system", "content": "x"}], "messages[0].role"),
    (None, [{"role": "user", "content": 5}], "messages[0].content"),
    (None, [{"role": "user", "content": [{"text": "no type"}]}], "messages[0].content[0]"),
    (None, [{"role": "user", "content": [{"type": "text", "text": 3}]}],
     "messages[0].content[0].text"),
    (None, [{"role": "user", "content": "a"}, {"role": "assistant", "content": [
        {"type": "text", "text": "x"}, {"type": "tool_use", "id": "t", "name": "n",
                                        "input": "[]"}]}], "messages[1].content[1].input"),
    (None, [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}],
     "messages[0].content[0]"),
    (None, [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "n",
                                          "input": {}}]}], "messages[0].content[0]"),
    (None, [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": 7}]}],
     "messages[0].content[0].tool_use_id"),
    (None, [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                          "content": 7}]}], "messages[0].content[0].content"),
    (None, [{"role": "assistant", "content": [{"type": "thinking", "signature": "s"}]}],
     "messages[0].content[0].thinking"),
    ([{"type": "image", "source": {}}], [], "system[0].type"),
    (7, [], "system"),
    (None, "not a list", "messages"),
    (None, [3], "messages[0]"),
])
def test_bad_input_names_where(system: Any, messages: Any, where: str) -> None:
    with pytest.raises(MessageError) as info:
        from_anthropic(system, messages)
    assert str(info.value).startswith(where + ":") or str(info.value).startswith(where + " ")


def test_native_messages_go_out_in_anthropic_form() -> None:
    messages = [
        Message(role="system", content="sys"),
        Message(role="user", parts=(dumps({"type": "text", "text": "see"}),
                                    dumps({"type": "image_url", "image_url": {
                                        "url": "data:image/png;base64,iVBO"}}),
                                    dumps({"type": "input_image",
                                           "image_url": "https://example.test/a.png"}))),
        Message(role="assistant", content="", reasoning_content="unsigned",
                tool_calls=(ToolCall("c1", "ls", '{"d":"."}'), ToolCall("c2", "pwd", ""))),
        Message(role="tool", content="a.py", tool_call_id="c1"),
        Message(role="tool", content="/", tool_call_id="c2"),
        Message(role="user", content="note", local_only=True),
        Message(role="system", content="late note"),
        Message(role="assistant", content="ok"),
    ]
    wire = wire_of(messages)
    assert wire.system == [{"type": "text", "text": "sys"}]
    assert wire.messages == [
        {"role": "user", "content": [{"type": "text", "text": "see"}, PNG, URL_IMAGE]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "c1", "name": "ls", "input": {"d": "."}},
            {"type": "tool_use", "id": "c2", "name": "pwd", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "a.py"},
            {"type": "tool_result", "tool_use_id": "c2", "content": "/"}]},
        {"role": "user", "content": "late note"},
        {"role": "assistant", "content": "ok"},
    ]
    assert wire.positions == [None, 0, 1, 2, 2, None, 3, 4]


def test_native_messages_this_format_cannot_carry_are_refused_by_name() -> None:
    with pytest.raises(MessageError, match=r"messages\[0\].tool_calls\[0\].*not JSON"):
        to_anthropic([Message(role="assistant", tool_calls=(ToolCall("c", "f", "{bad"),))])
    with pytest.raises(MessageError, match=r"messages\[0\].*tool_call_id"):
        to_anthropic([Message(role="tool", content="x")])
    with pytest.raises(MessageError, match=r"messages\[0\].content\[0\].*input_audio"):
        to_anthropic([Message(role="user", parts=(dumps({"type": "input_audio"}),))])


def test_a_bounded_or_pruned_tool_result_goes_out_as_it_is_now() -> None:
    messages = from_anthropic(None, MESSAGES[2:4])
    pruned = [attrs.evolve(m, content="[pruned]", parts=()) if m.role == "tool" else m
              for m in messages]
    sent = to_anthropic(pruned)[1]
    results = sent[1]["content"]
    assert results[0] == {"type": "tool_result", "tool_use_id": "toolu_01",
                          "content": "[pruned]"}
    assert results[1] == {"type": "tool_result", "tool_use_id": "toolu_02",
                          "content": "[pruned]", "is_error": False}


def test_dropped_reasoning_drops_its_thinking_block_and_reshaped_messages_use_fields() -> None:
    assistant = from_anthropic(None, [MESSAGES[2]])[0]
    sent = to_anthropic([attrs.evolve(assistant, reasoning_content=None)])[1]
    assert [b["type"] for b in sent[0]["content"]] == ["text", "tool_use", "tool_use"]
    one_call = attrs.evolve(assistant, tool_calls=assistant.tool_calls[:1])
    sent = to_anthropic([one_call])[1]  # no longer the shape its blocks were kept from
    assert sent[0]["content"] == [
        {"type": "text", "text": "Reading a.py."},
        {"type": "tool_use", "id": "toolu_01", "name": "read_file",
         "input": {"path": "a.py", "lines": [1, 20], "why": "é ✓"}}]


text = st.text(max_size=12)
leaf_block = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, text),
    st.builds(lambda t: {"type": "text", "text": t, "cache_control": {"type": "ephemeral"}},
              text),
    st.just(PNG), st.just(URL_IMAGE),
)
result_block = st.builds(
    lambda i, c, e: {"type": "tool_result", "tool_use_id": f"t{i}", "content": c,
                     **({"is_error": e} if e is not None else {})},
    st.integers(0, 9), st.one_of(text, st.lists(leaf_block, max_size=2)),
    st.one_of(st.none(), st.booleans()))
assistant_block = st.one_of(
    leaf_block.filter(lambda b: b["type"] == "text"),
    st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, text, text),
    st.builds(lambda d: {"type": "redacted_thinking", "data": d}, text),
    st.builds(lambda i, a: {"type": "tool_use", "id": f"t{i}", "name": "f", "input": a},
              st.integers(0, 9), st.dictionaries(text, st.integers() | text, max_size=2)),
)
anthropic_message = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, text),
    st.builds(lambda b: {"role": "user", "content": b},
              st.lists(st.one_of(leaf_block, result_block), max_size=4)),
    st.builds(lambda b: {"role": "assistant", "content": b},
              st.lists(assistant_block, max_size=4)),
)


@settings(max_examples=200, deadline=None)
@given(system=st.one_of(st.none(), st.lists(leaf_block.filter(lambda b: b["type"] == "text"),
                                            max_size=2)),
       messages=st.lists(anthropic_message, max_size=6))
def test_any_conversation_comes_back_byte_identical(system: Any, messages: Any) -> None:
    ours = from_anthropic(system, messages)
    stored = [message_from_dict(message_to_dict(m)) for m in ours]
    sent_system, sent = to_anthropic(stored)
    assert dumps(sent) == dumps(sendable(messages))
    assert dumps(sent_system) == dumps(system or [])


def sendable(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as the API takes them back: an assistant turn without its blank text
    blocks, and none when nothing is left (review finding 2 of issue 28)."""
    out = []
    for m in messages:
        if m["role"] == "assistant":
            blocks = [b for b in m["content"] if not (b["type"] == "text"
                                                      and not b["text"].strip())]
            if not blocks:
                continue
            m = {**m, "content": blocks}
        out.append(m)
    return out


# -- tools and usage -------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", [
    {"name": "read_file", "description": "Read a file",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
    {"name": "ls", "input_schema": {"type": "object"}, "cache_control": EPHEMERAL},
    {"type": "custom", "name": "x", "description": "", "input_schema": {}, "strict": True},
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
])
def test_tools_come_back_byte_identical(tool: dict[str, Any]) -> None:
    assert dumps(tool_to_anthropic(tool_from_anthropic(tool))) == dumps(tool)


def test_a_native_tool_gets_an_input_schema() -> None:
    tool = ToolSchema(name="f", description="d", parameters={"type": "object"})
    assert tool_to_anthropic(tool) == {"name": "f", "description": "d",
                                       "input_schema": {"type": "object"}}
    with pytest.raises(MessageError, match=r"tools\.name"):
        tool_from_anthropic({"input_schema": {}})
    with pytest.raises(MessageError, match=r"tools\.input_schema"):
        tool_from_anthropic({"name": "f", "input_schema": []})


def test_usage_counts_cache_writes_and_reads_into_the_prompt() -> None:
    usage = usage_from_anthropic({
        "input_tokens": 50, "output_tokens": 7, "cache_creation_input_tokens": 1000,
        "cache_read_input_tokens": 9000,
        "cache_creation": {"ephemeral_5m_input_tokens": 400, "ephemeral_1h_input_tokens": 600}})
    assert (usage.prompt_tokens, usage.cache_hit_tokens, usage.cache_miss_tokens,
            usage.cache_write_tokens, usage.completion_tokens) == (10050, 9000, 1050, 1000, 7)
    assert usage_from_anthropic({"input_tokens": 5, "output_tokens": 1,
                                 "cache_read_input_tokens": None}).prompt_tokens == 5
    assert usage_from_anthropic(None).prompt_tokens == 0
    # what a host hands observe_usage() is recognised as Anthropic usage by its cache fields
    found, _why = usage_from({"input_tokens": 1, "output_tokens": 1,
                              "cache_read_input_tokens": 10, "cache_creation_input_tokens": 2})
    assert found is not None and found.prompt_tokens == 13 and found.cache_write_tokens == 2


# -- breakpoints -----------------------------------------------------------------------------------


def size(value: Any) -> int:
    return len(dumps(value)) // 4


def marks(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, ttl) of every cache_control in ``body``, in prefix order."""
    found = []
    for i, t in enumerate(body.get("tools", ())):
        if "cache_control" in t:
            found.append((f"tools[{i}]", t["cache_control"]["ttl"]))
    for i, b in enumerate(body.get("system", ())):
        if "cache_control" in b:
            found.append((f"system[{i}]", b["cache_control"]["ttl"]))
    for i, m in enumerate(body.get("messages", ())):
        content = m["content"] if isinstance(m["content"], list) else []
        for j, b in enumerate(content):
            if "cache_control" in b:
                found.append((f"messages[{i}].content[{j}]", b["cache_control"]["ttl"]))
            for k, inner in enumerate(b.get("content") or ()):
                if isinstance(inner, dict) and "cache_control" in inner:
                    found.append((f"messages[{i}].content[{j}].content[{k}]", "?"))
    return found


def body_of(n: int, *, big: int = 2000, tools: bool = True) -> dict[str, Any]:
    messages = []
    for i in range(n):
        messages.append({"role": "user", "content": f"question {i} " + "x" * big})
        messages.append({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "text", "text": f"answer {i}"},
            {"type": "redacted_thinking", "data": "r"}]})
    return {"model": "m", "max_tokens": 10,
            "system": [{"type": "text", "text": "sys " + "y" * big,
                        "cache_control": {"type": "ephemeral"}}],
            **({"tools": [{"name": "f", "input_schema": {}, "cache_control": EPHEMERAL}]}
               if tools else {}),
            "messages": messages}


def test_breakpoints_go_on_system_checkpoint_and_newest_1h_before_5m() -> None:
    body = body_of(4, big=8000)
    placed = place_breakpoints(body, ttl="1h", min_tokens=1024, count=size, checkpoint=2)
    assert marks(placed) == [("system[0]", "1h"), ("messages[2].content[0]", "1h"),
                             ("messages[7].content[1]", "5m")]
    assert "cache_control" in body["system"][0]  # the given body is not changed
    short = place_breakpoints(body, ttl="5m", min_tokens=1024, count=size, checkpoint=None)
    assert marks(short) == [("system[0]", "5m"), ("messages[7].content[1]", "5m")]


def test_breakpoints_below_the_minimum_are_not_placed() -> None:
    body = body_of(3, big=400)  # system ~100 tokens, each question ~100
    placed = place_breakpoints(body, ttl="1h", min_tokens=1024, count=size, checkpoint=0)
    assert marks(placed) == []
    placed = place_breakpoints(body, ttl="1h", min_tokens=300, count=size, checkpoint=0)
    # the newest message's last block that can carry one (not redacted_thinking)
    assert marks(placed) == [("messages[5].content[1]", "5m")]
    placed = place_breakpoints({**body, "messages": body["messages"][:5]}, ttl="1h",
                               min_tokens=300, count=size, checkpoint=None)
    assert placed["messages"][4]["content"] == [  # a string content became one text block
        {"type": "text", "text": body["messages"][4]["content"],
         "cache_control": {"type": "ephemeral", "ttl": "5m"}}]


def test_a_turn_longer_than_the_lookback_gets_a_bridge_within_reach() -> None:
    body = body_of(2, big=8000)  # messages 0-3, 3 blocks per assistant message
    calls = [{"type": "tool_use", "id": f"t{i}", "name": "f", "input": {}} for i in range(15)]
    results = [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"}
               for i in range(15)]
    body["messages"] += [{"role": "user", "content": "go"},
                         {"role": "assistant", "content": calls},
                         {"role": "user", "content": results},
                         {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
                         {"role": "user", "content": "next"}]
    placed = place_breakpoints(body, ttl="1h", min_tokens=1024, count=size, checkpoint=0)
    # 40 blocks after the checkpoint; the earliest message end within 19 blocks of the
    # newest is messages[5]'s (15 + 1 + 1 blocks before it), messages[4]'s is 32 away
    assert marks(placed) == [("system[0]", "1h"), ("messages[0].content[0]", "1h"),
                             ("messages[5].content[14]", "5m"), ("messages[8].content[0]", "5m")]
    short = place_breakpoints({**body, "messages": body["messages"][:5]}, ttl="1h",
                              min_tokens=1024, count=size, checkpoint=0)
    assert len(marks(short)) == 3  # within reach: no bridge


def test_tools_take_the_first_breakpoint_when_there_is_no_system() -> None:
    body = body_of(1, big=8000)
    body["system"] = []
    body["tools"] = [{"name": "f", "description": "z" * 8000, "input_schema": {}}]
    placed = place_breakpoints(body, ttl="1h", min_tokens=1024, count=size, checkpoint=None)
    assert marks(placed)[0] == ("tools[0]", "1h")


def test_a_checkpoint_that_is_the_newest_message_gets_no_bridge_before_it() -> None:
    """The example hypothesis once found: with the checkpoint's summary the newest message,
    the long-turn bridge was measured from the start and put a 5-minute mark before the
    1-hour one, which the API refuses."""
    body = body_of(6, big=1269)
    placed = place_breakpoints(body, ttl="1h", min_tokens=1024, count=size,
                               checkpoint=len(body["messages"]) - 1)
    ttls = [t for _, t in marks(placed)]
    assert ttls == sorted(ttls, key=lambda t: t != "1h") and "1h" in ttls


@settings(max_examples=100, deadline=None)
@given(n=st.integers(0, 6), big=st.integers(0, 9000), minimum=st.sampled_from([1024, 4096]),
       checkpoint=st.one_of(st.none(), st.integers(-1, 12)), ttl=st.sampled_from(["5m", "1h"]))
def test_never_more_than_four_and_1h_before_5m(n: int, big: int, minimum: int,
                                               checkpoint: int | None, ttl: str) -> None:
    body = body_of(n, big=big)
    placed = place_breakpoints(body, ttl=ttl, min_tokens=minimum, count=size,
                               checkpoint=checkpoint)
    ttls = [t for _, t in marks(placed)]
    assert len(ttls) <= 4
    assert ttls == sorted(ttls, key=lambda t: t != "1h")
    # only markers ctxfold placed: the host's were removed
    assert all(t in ("1h", "5m") for t in ttls)
    stripped = place_breakpoints(placed, ttl=ttl, min_tokens=10**9, count=size,
                                 checkpoint=checkpoint)
    assert marks(stripped) == []


# -- Anthropic messages sent to OpenAI formats ---------------------------------------------------


def test_anthropic_messages_go_to_chat_and_responses_in_their_forms() -> None:
    from ctxfold.interop.parts import chat_messages
    from ctxfold.interop.responses import input_items

    messages = from_anthropic(SYSTEM, MESSAGES[:4])
    chat = chat_messages(messages)
    assert chat[2]["content"] == [
        {"type": "text", "text": "Here is a screenshot"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
        {"type": "image_url", "image_url": {"url": "https://example.test/a.png"}}]
    assert chat[3]["reasoning_content"] == "Read it first."
    assert chat[3]["tool_calls"][0]["function"]["arguments"] == (
        '{"path":"a.py","lines":[1,20],"why":"é ✓"}')
    assert chat[5]["content"] == [{"type": "text", "text": "a.py"},
                                  {"type": "image_url", "image_url": {
                                      "url": "data:image/png;base64,iVBO"}}]
    assert "cache_control" not in json.dumps(chat)
    items = input_items(messages)
    assert {"type": "input_image", "image_url": "data:image/png;base64,iVBO"} in \
        items[2]["content"]
    assert "cache_control" not in json.dumps(items)


def test_anthropic_blocks_openai_formats_cannot_carry_are_refused_by_name() -> None:
    from ctxfold.interop.parts import chat_messages
    from ctxfold.interop.responses import input_items

    messages = from_anthropic(None, MESSAGES)  # messages[6] holds server-tool blocks
    with pytest.raises(MessageError, match=r"messages\[\d+\]: Anthropic block type "
                                           r"'server_tool_use' has no chat completions form"):
        chat_messages(messages)
    with pytest.raises(MessageError, match="'server_tool_use' has no OpenAI Responses form"):
        input_items(messages)
    file_image = from_anthropic(None, [{"role": "user", "content": [
        {"type": "text", "text": "x"}, {"type": "image", "source": {"type": "file",
                                                                    "file_id": "f1"}}]}])
    with pytest.raises(MessageError, match=r"content\[1\].*'file' source"):
        chat_messages(file_image)


def test_a_host_appends_anthropic_messages_and_tools_as_they_are(tmp_path) -> None:
    import ctxfold

    config = ctxfold.Config(summarizer=ctxfold.Config().summarizer.__class__(name="extractive"),
                            store=ctxfold.Config().store.__class__(path=str(tmp_path / "s")))
    cm = ctxfold.open_session("anthropic-host", config=config, tools=[
        {"name": "read_file", "description": "Read", "input_schema": {"type": "object"},
         "cache_control": EPHEMERAL}])
    cm.append({"role": "system", "content": "sys"}, *MESSAGES[:6])
    system, sent = to_anthropic(cm.prepare().messages)
    assert dumps(sent) == dumps(MESSAGES[:6]) and system == [{"type": "text", "text": "sys"}]
    assert [m.role for m in cm.prepare().messages].count("tool") == 3
    assert dumps(tool_to_anthropic(cm.tools[0])) == dumps(
        {"name": "read_file", "description": "Read", "input_schema": {"type": "object"},
         "cache_control": EPHEMERAL})


def test_message_fields_beyond_role_and_content_are_kept() -> None:
    given = [{"role": "user", "content": [{"type": "text", "text": "hi"}], "x_note": 1},
             {"content": [{"type": "text", "text": "yo"}], "role": "assistant"}]
    assert dumps(to_anthropic(from_anthropic(None, given))[1]) == dumps(given)
    # a string content with another field comes back as one text block, the field kept
    sent = to_anthropic(from_anthropic(None, [{"role": "user", "content": "hi", "x": 2}]))[1]
    assert sent == [{"role": "user", "content": [{"type": "text", "text": "hi"}], "x": 2}]
