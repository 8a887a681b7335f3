"""The client's answer in Anthropic's Messages format: the event sequence as deltas arrive
(``message_start``, per content block ``content_block_start`` / ``content_block_delta`` /
``content_block_stop``, ``message_delta`` with the stop reason and usage, ``message_stop``)
or one ``message`` object; usage as the proxy measured it.

The events and objects are those of https://docs.anthropic.com/en/docs/build-with-claude/streaming
and https://docs.anthropic.com/en/api/messages. One client answer may span several upstream
rounds (the proxy answered ``use_capability`` in between); it is still one message, its
blocks numbered across the rounds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ctxfold.kernel.types import Usage
from ctxfold.serve.deltas import (
    Block,
    CallArgs,
    CallEnd,
    CallStart,
    Citation,
    Delta,
    Item,
    Reasoning,
    Signature,
    Text,
)
from ctxfold.serve.render_chat import sse

#: Anthropic's ``stop_reason`` per finish reason of the other formats; Anthropic's own
#: reasons (``end_turn``, ``tool_use``, ``pause_turn``, ``refusal``, …) stay as they are.
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "content_filter": "refusal"}
#: The Anthropic reasons the provider keeps as they are
#: (:data:`ctxfold.plugins.providers.anthropic.STOP_REASONS` maps the others), in OpenAI
#: terms, for an OpenAI-format client.
FINISH_REASONS = {"refusal": "content_filter", "pause_turn": "stop"}


def stop_reason(finish_reason: str, stop_sequence: str | None = None) -> str:
    """Anthropic's ``stop_reason`` for ``finish_reason`` (of any format); ``stop_sequence``
    when one ended the answer (:attr:`ctxfold.kernel.types.ChatResponse.stop_sequence`)."""
    if finish_reason == "stop" and stop_sequence is not None:
        return "stop_sequence"
    return STOP_REASONS.get(finish_reason, finish_reason or "end_turn")


def anthropic_usage(usage: Usage) -> dict[str, Any]:
    """``usage`` in the Anthropic shape: ``input_tokens`` are the uncached ones (cache reads
    and writes are counted apart, https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching);
    a write is known only when the upstream reported one (an OpenAI-format upstream
    reports none: its cache is written without a fee)."""
    written = usage.cache_write_tokens
    uncached = max(0, usage.prompt_tokens - usage.cache_hit_tokens - written)
    return {"input_tokens": uncached, "cache_creation_input_tokens": written,
            "cache_read_input_tokens": usage.cache_hit_tokens,
            "output_tokens": usage.completion_tokens}


def _arguments(text: str) -> Any:
    """A tool call's JSON arguments as the ``input`` object (``{}`` when there are none)."""
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return {}


class AnthropicRenderer:
    """Renders one client answer (see the module docstring); the exchange feeds it only
    what the client may see, with tool-call keys numbered 0, 1, … across rounds.

    Anthropic streams one block at a time: every ``input_json_delta`` of a ``tool_use``
    block comes before its ``content_block_stop``. A chat upstream may interleave the
    argument fragments of several calls, so a call that starts while another is open and
    not known complete (:class:`~ctxfold.serve.deltas.CallEnd`) waits, its fragments held,
    until the open one ends, the round ends, or a delta that is not a call's arrives."""

    def __init__(self, *, message_id: str, model: str) -> None:
        self.message_id = message_id
        self.model = model
        self.blocks: list[dict[str, Any]] = []
        self._partial: dict[int, list[str]] = {}  # tool_use block -> its argument text
        self._calls: dict[Any, int] = {}  # call key -> block index
        self._open: int | None = None
        self._text_key: Any = None  # the upstream text block the open text block shows
        self._waiting: dict[Any, tuple[dict[str, Any], list[str]]] = {}  # call -> block, args
        self._ended: set[Any] = set()  # calls whose arguments are complete
        self._open_call: Any = None  # the call key of the open tool_use block
        #: The stop sequence that ended the answer (the exchange sets it from the last
        #: round's response), told as ``stop_reason`` ``stop_sequence`` and its string.
        self.stop_sequence: str | None = None

    def _shell(self) -> dict[str, Any]:
        return {"id": self.message_id, "type": "message", "role": "assistant",
                "model": self.model, "content": [], "stop_reason": None,
                "stop_sequence": None,
                "usage": anthropic_usage(Usage())}

    def start(self) -> list[str]:
        """``message_start``, before anything arrived from upstream (its usage is zero: the
        final counts come with ``message_delta``)."""
        return [sse({"type": "message_start", "message": self._shell()},
                    event="message_start")]

    def _close(self) -> list[str]:
        if self._open is None:
            return []
        index, self._open = self._open, None
        return [sse({"type": "content_block_stop", "index": index},
                    event="content_block_stop")]

    def _add(self, block: dict[str, Any], shown: dict[str, Any] | None = None) -> list[str]:
        out = self._close()
        self.blocks.append(block)
        self._open = len(self.blocks) - 1
        return [*out, sse({"type": "content_block_start", "index": self._open,
                           "content_block": shown if shown is not None else dict(block)},
                          event="content_block_start")]

    def _delta(self, index: int, delta: dict[str, Any]) -> str:
        return sse({"type": "content_block_delta", "index": index, "delta": delta},
                   event="content_block_delta")

    def _kind(self) -> str | None:
        return self.blocks[self._open]["type"] if self._open is not None else None

    def _text(self, key: Any) -> list[str]:
        """The open text block for upstream text block ``key``: a new one when none is open
        or the open one shows another upstream block (blocks are kept apart, as sent)."""
        if self._kind() == "text" and self._text_key == key:
            return []
        out = self._add({"type": "text", "text": ""})
        self._text_key = key
        return out

    def feed(self, delta: Delta) -> list[str]:
        """The events of one client-visible delta."""
        out: list[str] = []
        if isinstance(delta, Item):
            return []  # a Responses item: no Anthropic form
        if not isinstance(delta, CallStart | CallArgs | CallEnd) and self._waiting:
            return [*self._release(), *self.feed(delta)]
        if isinstance(delta, Block):
            out = self._add(dict(delta.block))
            return [*out, *self._close()]
        if isinstance(delta, Text):
            out = self._text(delta.key)
            assert self._open is not None
            self.blocks[self._open]["text"] += delta.text
            return [*out, self._delta(self._open, {"type": "text_delta", "text": delta.text})]
        if isinstance(delta, Citation):
            out = self._text(delta.key)
            assert self._open is not None
            block = self.blocks[self._open]
            block["citations"] = [*block.get("citations", ()), dict(delta.citation)]
            return [*out, self._delta(self._open, {"type": "citations_delta",
                                                   "citation": dict(delta.citation)})]
        if isinstance(delta, Reasoning):
            if self._kind() != "thinking" or self.blocks[self._open or 0]["signature"]:
                out = self._add({"type": "thinking", "thinking": "", "signature": ""})
            assert self._open is not None
            self.blocks[self._open]["thinking"] += delta.text
            return [*out, self._delta(self._open, {"type": "thinking_delta",
                                                   "thinking": delta.text})]
        if isinstance(delta, Signature):
            if self._kind() != "thinking":
                out = self._add({"type": "thinking", "thinking": "", "signature": ""})
            assert self._open is not None
            self.blocks[self._open]["signature"] = delta.text  # replaces, as the SDK reads it
            return [*out, self._delta(self._open, {"type": "signature_delta",
                                                   "signature": delta.text})]
        if isinstance(delta, CallStart):
            block = {"type": "tool_use", "id": delta.call_id, "name": delta.name, "input": {}}
            if self._waiting or (self._kind() == "tool_use"
                                 and self._open_call not in self._ended):
                self._waiting[delta.key] = (block, [])
                return []
            return self._start_call(delta.key, block, [])
        if isinstance(delta, CallEnd):
            self._ended.add(delta.key)
            if delta.key != self._open_call or self._kind() != "tool_use":
                return []
            out = self._close()
            while self._waiting:
                key = next(iter(self._waiting))
                out += self._start_call(key, *self._waiting.pop(key))
                if key not in self._ended:
                    break
                out += self._close()
            return out
        assert isinstance(delta, CallArgs)
        if delta.key in self._waiting:
            self._waiting[delta.key][1].append(delta.text)
            return []
        index = self._calls[delta.key]
        self._partial[index].append(delta.text)
        if index != self._open:  # cannot happen: a call's block closes once it is complete
            return []
        return [self._delta(index, {"type": "input_json_delta", "partial_json": delta.text})]

    def _start_call(self, key: Any, block: dict[str, Any], args: list[str]) -> list[str]:
        """Open call ``key``'s ``tool_use`` block, with the argument fragments held so far."""
        out = self._add(block)
        assert self._open is not None
        self._calls[key] = self._open
        self._open_call = key
        self._partial[self._open] = list(args)
        if args:
            out.append(self._delta(self._open, {"type": "input_json_delta",
                                                "partial_json": "".join(args)}))
        return out

    def _release(self) -> list[str]:
        """Every waiting call, in the order they started (a delta that is not a call's, or
        the round's end, says the calls before it are complete)."""
        out: list[str] = []
        while self._waiting:
            key = next(iter(self._waiting))
            out += self._start_call(key, *self._waiting.pop(key))
        return out

    def end_round(self) -> list[str]:
        """A round ended and another continues the same answer: its open block closes."""
        return [*self._release(), *self._close()]

    def _content(self) -> list[dict[str, Any]]:
        content = []
        for index, block in enumerate(self.blocks):
            if index in self._partial:
                block = {**block, "input": _arguments("".join(self._partial[index]))}
            content.append(block)
        return content

    def finish(self, finish_reason: str, usage: Usage) -> list[str]:
        """The open block's ``content_block_stop``, ``message_delta`` (the stop reason, the
        whole answer's usage), ``message_stop``."""
        return [*self._release(), *self._close(),
                sse({"type": "message_delta",
                     "delta": {"stop_reason": stop_reason(finish_reason,
                                                          self.stop_sequence),
                               "stop_sequence": self.stop_sequence or None},
                     "usage": anthropic_usage(usage)}, event="message_delta"),
                sse({"type": "message_stop"}, event="message_stop")]

    def body(self, finish_reason: str, usage: Usage) -> dict[str, Any]:
        """The whole ``message`` object (a non-streaming answer)."""
        self._release()
        return {**self._shell(), "content": self._content(),
                "stop_reason": stop_reason(finish_reason, self.stop_sequence),
                "stop_sequence": self.stop_sequence or None, "usage": anthropic_usage(usage)}

    def error(self, payload: Mapping[str, Any]) -> list[str]:
        """A failure after the stream started: an ``error`` event (the Anthropic SDK raises
        the error's class on it); nothing follows."""
        return [sse(payload, event="error")]
