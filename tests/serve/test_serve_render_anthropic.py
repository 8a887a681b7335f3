"""The Anthropic answer stream the proxy renders, read by the official SDK's own accumulator:
an Anthropic upstream's blocks (thinking with its signature, text, a tool call whose input
arrives in pieces, redacted thinking, a server-tool block) come out as they went in, and a
chat upstream's deltas become the same kinds of blocks."""

from __future__ import annotations

import json
from typing import Any

from anthropic.lib.streaming._messages import accumulate_event

from ctxfold import SseEvent, Usage
from ctxfold.serve.deltas import AnthropicDeltas, CallArgs, CallStart, Reasoning, Text
from ctxfold.serve.render_anthropic import AnthropicRenderer

BLOCKS: list[dict[str, Any]] = [
    {"type": "thinking", "thinking": "Let me look.", "signature": "EqQBCkYIBxgCKkA="},
    {"type": "text", "text": "I will list the files."},
    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
     "input": {"query": "ctxfold"}},
    {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls -la"}},
]


def upstream_events() -> list[SseEvent]:
    """An Anthropic stream of :data:`BLOCKS`, inputs in two pieces each."""
    out = [("message_start", {"type": "message_start", "message": {
        "id": "msg_up", "type": "message", "role": "assistant", "model": "m", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1}}})]
    for index, block in enumerate(BLOCKS):
        kind = block["type"]
        start = {**block, **({"thinking": "", "signature": ""} if kind == "thinking" else {}),
                 **({"text": ""} if kind == "text" else {}),
                 **({"input": {}} if "input" in block else {})}
        out.append(("content_block_start", {"type": "content_block_start", "index": index,
                                            "content_block": start}))
        deltas: list[dict[str, Any]] = []
        if kind == "thinking":
            deltas = [{"type": "thinking_delta", "thinking": "Let me "},
                      {"type": "thinking_delta", "thinking": "look."},
                      {"type": "signature_delta", "signature": block["signature"]}]
        elif kind == "text":
            deltas = [{"type": "text_delta", "text": "I will list "},
                      {"type": "text_delta", "text": "the files."}]
        elif "input" in block:
            text = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": text[:7]},
                      {"type": "input_json_delta", "partial_json": text[7:]}]
        out += [("content_block_delta", {"type": "content_block_delta", "index": index,
                                         "delta": d}) for d in deltas]
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    out += [("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                               "usage": {"output_tokens": 30}}),
            ("message_stop", {"type": "message_stop"})]
    return [SseEvent(event=name, data=json.dumps(data)) for name, data in out]


def read_with_the_sdk(chunks: list[str]) -> Any:
    """The SDK's final message for the rendered SSE text."""
    snapshot, bufs = None, {}
    for chunk in chunks:
        lines = chunk.strip().splitlines()
        name = lines[0].removeprefix("event: ")
        data = json.loads(lines[1].removeprefix("data: "))
        assert data["type"] == name
        snapshot = accumulate_event(event=data, current_snapshot=snapshot, json_bufs=bufs)
    return snapshot


def test_an_anthropic_upstreams_blocks_reach_the_sdk_as_they_were_sent() -> None:
    parser = AnthropicDeltas()
    renderer = AnthropicRenderer(message_id="msg_1", model="m")
    chunks = renderer.start()
    for event in upstream_events():
        for delta in parser.feed(event):
            chunks += renderer.feed(delta)
    chunks += renderer.finish("tool_calls", Usage(prompt_tokens=100, completion_tokens=30,
                                                  cache_hit_tokens=60, cache_write_tokens=25))
    message = read_with_the_sdk(chunks)
    assert [b.model_dump(exclude_none=True) for b in message.content] == BLOCKS
    assert message.stop_reason == "tool_use"
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens,
            message.usage.cache_creation_input_tokens, message.usage.output_tokens) == \
        (15, 60, 25, 30)
    # The non-streaming body holds the same blocks.
    assert renderer.body("tool_calls", Usage())["content"] == BLOCKS


def test_chat_deltas_become_anthropic_blocks_across_rounds() -> None:
    renderer = AnthropicRenderer(message_id="msg_2", model="m")
    chunks = renderer.start()
    for delta in (Reasoning("hm"), Text("one "), Text("two"), CallStart(0, "c0", "bash"),
                  CallArgs(0, '{"command"'), CallStart(1, "c1", "bash"),
                  CallArgs(0, ': "ls"}'),  # a late fragment of the first call
                  CallArgs(1, '{"command": "pwd"}')):
        chunks += renderer.feed(delta)
    chunks += renderer.end_round()
    chunks += renderer.feed(Text("after the round"))
    chunks += renderer.finish("stop", Usage(prompt_tokens=5, completion_tokens=3))
    message = read_with_the_sdk(chunks)
    assert [b.model_dump(exclude_none=True) for b in message.content] == [
        {"type": "thinking", "thinking": "hm", "signature": ""},
        {"type": "text", "text": "one two"},
        {"type": "tool_use", "id": "c0", "name": "bash", "input": {"command": "ls"}},
        {"type": "tool_use", "id": "c1", "name": "bash", "input": {"command": "pwd"}},
        {"type": "text", "text": "after the round"}]
    assert message.stop_reason == "end_turn"
    stops = [json.loads(c.splitlines()[1][6:])["index"] for c in chunks
             if c.startswith("event: content_block_stop")]
    assert stops == [0, 1, 2, 3, 4]  # every block closed once, in order
