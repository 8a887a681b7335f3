"""What one upstream answer adds, as it arrives: text, reasoning, tool-call starts and
argument fragments — the same kinds from every wire format (Chat Completions, Responses,
Anthropic Messages), so one renderer per *client* format serves any upstream.

The provider's own stream assembler (its translator's) is fed the same events first: it
raises the typed error of an in-stream failure and assembles the message that enters the
transcript; these parsers only say what to forward.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from ctxfold.interop.anthropic import to_anthropic
from ctxfold.kernel.types import Message, SseEvent


@attrs.frozen
class Text:
    """Answer text; ``key`` is the Anthropic text block it belongs to (its ``index``), so an
    answer of several text blocks (web search, citations) reaches an Anthropic client in as
    many blocks. ``None`` in the other formats, whose text is one stream."""

    text: str
    key: Any = None


@attrs.frozen
class Citation:
    """A citation of Anthropic text block ``key`` (a ``citations_delta``,
    https://docs.anthropic.com/en/docs/build-with-claude/citations); the other client formats
    have no place for it."""

    key: Any
    citation: Mapping[str, Any]


@attrs.frozen
class Reasoning:
    """Reasoning text (DeepSeek ``reasoning_content``, a Responses reasoning summary)."""

    text: str


@attrs.frozen
class CallStart:
    """A tool call begins; ``key`` tells its fragments apart within one upstream answer."""

    key: Any
    call_id: str
    name: str


@attrs.frozen
class CallArgs:
    """A fragment of a tool call's JSON arguments."""

    key: Any
    text: str


@attrs.frozen
class CallEnd:
    """A tool call's arguments are complete (an Anthropic ``tool_use`` block's
    ``content_block_stop``, a Responses ``function_call``'s ``response.output_item.done``);
    a chat stream does not say, so its calls end with the round or with the next delta that
    is not a call's."""

    key: Any


@attrs.frozen
class Item:
    """A whole Responses output item of a type the proxy does not model (``custom_tool_call``,
    ``web_search_call``, …), forwarded as the upstream sent it."""

    key: Any
    item: Mapping[str, Any]


@attrs.frozen
class Signature:
    """The signature of the reasoning just sent (an Anthropic ``thinking`` block's
    ``signature``), which an Anthropic client must send back with the block; the other
    client formats have no place for it."""

    text: str


@attrs.frozen
class Block:
    """A whole Anthropic content block of a type the proxy does not model
    (``redacted_thinking``, ``server_tool_use``, ``web_search_tool_result``, …), forwarded
    as the upstream sent it to an Anthropic client (the other formats have no form for it)."""

    key: Any
    block: Mapping[str, Any]


Delta = Text | Citation | Reasoning | Signature | CallStart | CallArgs | CallEnd | Item | Block


def message_deltas(message: Message) -> list[Delta]:
    """The deltas of a whole assembled message (a non-streaming answer); one that came
    from an Anthropic upstream in its blocks' order, signatures and other blocks too."""
    if message.anthropic_blocks:
        return _block_deltas(message)
    out: list[Delta] = []
    if message.reasoning_content:
        out.append(Reasoning(message.reasoning_content))
    if message.content:
        out.append(Text(message.content))
    for i, call in enumerate(message.tool_calls):
        out.append(CallStart(i, call.id, call.name))
        if call.arguments:
            out.append(CallArgs(i, call.arguments))
    return out


def _block_deltas(message: Message) -> list[Delta]:
    _system, wire = to_anthropic([message])
    content = wire[0]["content"] if wire else []
    if isinstance(content, str):
        return [Text(content)] if content else []
    out: list[Delta] = []
    for key, block in enumerate(content):
        kind = block.get("type")
        if kind == "text":
            out += [Text(str(block["text"]), key)] if block.get("text") else []
            out += [Citation(key, c) for c in block.get("citations") or ()
                    if isinstance(c, Mapping)]
        elif kind == "thinking":
            out += [Reasoning(str(block.get("thinking") or ""))]
            out += [Signature(str(block["signature"]))] if block.get("signature") else []
        elif kind == "tool_use":
            out.append(CallStart(key, str(block.get("id") or ""), str(block.get("name") or "")))
            if block.get("input"):
                out.append(CallArgs(key, json.dumps(block["input"], ensure_ascii=False)))
        else:
            out.append(Block(key, block))
    return out


class ChatDeltas:
    """Deltas of a Chat Completions stream. A call is started once its name is known (the
    proxy must know whether it is ``use_capability`` before forwarding anything of it)."""

    def __init__(self) -> None:
        self._calls: dict[Any, dict[str, Any]] = {}

    def feed(self, event: SseEvent) -> list[Delta]:
        data = event.data.strip()
        if not data or data == "[DONE]":
            return []
        chunk = json.loads(data)
        out: list[Delta] = []
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out.append(Reasoning(str(delta["reasoning_content"])))
            if delta.get("content"):
                out.append(Text(str(delta["content"])))
            for position, frag in enumerate(delta.get("tool_calls") or ()):
                out.extend(self._fragment(frag.get("index", position), frag))
        return out

    def _fragment(self, key: Any, frag: Mapping[str, Any]) -> list[Delta]:
        slot = self._calls.setdefault(key, {"id": "", "name": "", "args": [], "started": False})
        fn = frag.get("function") or {}
        slot["id"] = slot["id"] or str(frag.get("id") or "")
        slot["name"] = slot["name"] or str(fn.get("name") or "")
        if fn.get("arguments"):
            slot["args"].append(str(fn["arguments"]))
        return self._release(key, slot) if slot["started"] or slot["name"] else []

    def _release(self, key: Any, slot: dict[str, Any]) -> list[Delta]:
        out: list[Delta] = []
        if not slot["started"]:
            slot["started"] = True
            out.append(CallStart(key, slot["id"], slot["name"]))
        if slot["args"]:
            out.append(CallArgs(key, "".join(slot["args"])))
            slot["args"] = []
        return out

    def finish(self) -> list[Delta]:
        """Calls whose name never came, at the end of the answer."""
        return [d for key, slot in self._calls.items() if not slot["started"]
                for d in self._release(key, slot)]


class ResponsesDeltas:
    """Deltas of a Responses event stream; a finished item stands in for deltas that were
    never sent for it (an item may arrive whole in ``response.output_item.done``)."""

    def __init__(self) -> None:
        self._streamed: set[Any] = set()
        self._calls: set[Any] = set()

    def feed(self, event: SseEvent) -> list[Delta]:
        data = event.data.strip()
        if not data or data == "[DONE]":
            return []
        payload = json.loads(data)
        kind = payload.get("type") or event.event
        key = payload.get("output_index", payload.get("item_id"))
        delta = str(payload.get("delta") or "")
        if kind == "response.output_text.delta" and delta:
            self._streamed.add(key)
            return [Text(delta)]
        if kind in ("response.reasoning_text.delta",
                    "response.reasoning_summary_text.delta") and delta:
            self._streamed.add(key)
            return [Reasoning(delta)]
        if kind == "response.function_call_arguments.delta" and delta:
            self._streamed.add(key)
            return [*self._start(key, payload.get("item")), CallArgs(key, delta)]
        if kind == "response.output_item.added":
            return self._start(key, payload.get("item"))
        if kind == "response.output_item.done":
            return self._done(key, payload.get("item"))
        return []

    def _start(self, key: Any, item: Any) -> list[Delta]:
        if key in self._calls or not isinstance(item, Mapping) \
                or item.get("type") != "function_call":
            return []
        self._calls.add(key)
        return [CallStart(key, str(item.get("call_id") or ""), str(item.get("name") or ""))]

    def _done(self, key: Any, item: Any) -> list[Delta]:
        if not isinstance(item, Mapping):
            return []
        kind = item.get("type")
        if kind == "function_call" and key in self._streamed:
            return [CallEnd(key)] if key in self._calls else []
        if key in self._streamed:
            return []
        if kind == "function_call":
            args = str(item.get("arguments") or "")
            return [*self._start(key, item), *([CallArgs(key, args)] if args else []),
                    CallEnd(key)]
        if kind == "message":
            text = "".join(str(p.get("text") or "") for p in item.get("content") or ()
                           if isinstance(p, Mapping) and p.get("type") == "output_text")
            return [Text(text)] if text else []
        if kind == "reasoning":
            parts = [*(item.get("summary") or ()), *(item.get("content") or ())]
            text = "".join(str(p.get("text") or "") for p in parts if isinstance(p, Mapping))
            return [Reasoning(text)] if text else []
        return [Item(key, item)] if isinstance(kind, str) else []

    def finish(self) -> list[Delta]:
        """Nothing is held back in this format."""
        return []


class AnthropicDeltas:
    """Deltas of an Anthropic Messages event stream
    (https://docs.anthropic.com/en/docs/build-with-claude/streaming): ``content_block_start``
    opens a block at ``index``, ``content_block_delta`` carries its ``text_delta``,
    ``thinking_delta``, ``signature_delta`` or ``input_json_delta``. A block of a type the
    proxy does not model is forwarded whole when it stops (its streamed input joined in)."""

    def __init__(self) -> None:
        self._others: dict[Any, dict[str, Any]] = {}
        self._inputs: dict[Any, list[str]] = {}
        self._calls: set[Any] = set()

    def feed(self, event: SseEvent) -> list[Delta]:
        data = event.data.strip()
        if not data:
            return []
        payload = json.loads(data)
        if not isinstance(payload, Mapping):
            return []
        kind = payload.get("type") or event.event
        key = payload.get("index")
        if kind == "content_block_start":
            return self._start(key, payload.get("content_block"))
        if kind == "content_block_delta":
            return self._delta(key, payload.get("delta"))
        if kind == "content_block_stop" and key in self._calls:
            self._calls.discard(key)
            return [CallEnd(key)]
        if kind == "content_block_stop" and key in self._others:
            block = self._others.pop(key)
            parts = self._inputs.pop(key, [])
            if parts:
                try:
                    block["input"] = json.loads("".join(parts))
                except ValueError:
                    block["input"] = {}
            return [Block(key, block)]
        return []

    def _start(self, key: Any, block: Any) -> list[Delta]:
        if not isinstance(block, Mapping):
            return []
        kind = block.get("type")
        if kind == "text":
            text: list[Delta] = [Text(str(block["text"]), key)] if block.get("text") else []
            return [*text, *(Citation(key, c) for c in block.get("citations") or ()
                             if isinstance(c, Mapping))]
        if kind == "thinking":
            out: list[Delta] = []
            if block.get("thinking"):
                out.append(Reasoning(str(block["thinking"])))
            if block.get("signature"):
                out.append(Signature(str(block["signature"])))
            return out
        if kind == "tool_use":
            self._calls.add(key)
            start: list[Delta] = [CallStart(key, str(block.get("id") or ""),
                                            str(block.get("name") or ""))]
            given = block.get("input")
            if given:  # streamed calls start with {} and send their input as deltas
                start.append(CallArgs(key, json.dumps(given, ensure_ascii=False)))
            return start
        self._others[key] = dict(block)
        return []

    def _delta(self, key: Any, delta: Any) -> list[Delta]:
        if not isinstance(delta, Mapping):
            return []
        kind = delta.get("type")
        if kind == "text_delta" and delta.get("text"):
            return [Text(str(delta["text"]), key)]
        if kind == "citations_delta" and isinstance(delta.get("citation"), Mapping):
            return [Citation(key, delta["citation"])]
        if kind == "thinking_delta" and delta.get("thinking"):
            return [Reasoning(str(delta["thinking"]))]
        if kind == "signature_delta" and delta.get("signature"):
            return [Signature(str(delta["signature"]))]
        if kind == "input_json_delta" and delta.get("partial_json"):
            if key in self._others:
                self._inputs.setdefault(key, []).append(str(delta["partial_json"]))
                return []
            return [CallArgs(key, str(delta["partial_json"]))]
        return []

    def finish(self) -> list[Delta]:
        """Nothing is held back in this format."""
        return []


def parser_for(wire: str) -> ChatDeltas | ResponsesDeltas | AnthropicDeltas:
    """A fresh parser for one upstream answer in ``wire`` format."""
    if wire == "messages":
        return AnthropicDeltas()
    return ResponsesDeltas() if wire == "responses" else ChatDeltas()
