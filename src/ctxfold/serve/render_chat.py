"""The client's answer in the Chat Completions format: ``chat.completion.chunk`` events as
deltas arrive, or one ``chat.completion`` object; usage as the proxy measured it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ctxfold.kernel.types import Usage
from ctxfold.serve.deltas import (
    Block,
    CallEnd,
    CallStart,
    Citation,
    Delta,
    Item,
    Reasoning,
    Signature,
    Text,
)


def sse(data: Any, event: str | None = None) -> str:
    """One server-sent event carrying ``data`` as JSON."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


def chat_usage(usage: Usage) -> dict[str, Any]:
    """``usage`` in the Chat Completions shape (cache hits as ``cached_tokens``)."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_hit_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


class ChatRenderer:
    """Renders one client answer; the exchange feeds it only what the client may see, with
    tool-call keys already numbered 0, 1, … across upstream rounds."""

    def __init__(self, *, response_id: str, model: str, created: int,
                 include_usage: bool) -> None:
        self.response_id = response_id
        self.model = model
        self.created = created
        self.include_usage = include_usage
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}

    def _chunk(self, delta: dict[str, Any], finish: str | None = None,
               usage: Usage | None = None) -> str:
        chunk: dict[str, Any] = {"id": self.response_id, "object": "chat.completion.chunk",
                                 "created": self.created, "model": self.model,
                                 "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                              "finish_reason": finish}]}
        if usage is not None:
            chunk["usage"] = chat_usage(usage)
        return sse(chunk)

    def start(self) -> list[str]:
        """The first chunk (the role), sent before anything arrived from upstream."""
        return [self._chunk({"role": "assistant", "content": ""})]

    def feed(self, delta: Delta) -> list[str]:
        """The chunk of one client-visible delta."""
        if isinstance(delta, Text):
            self.text.append(delta.text)
            return [self._chunk({"content": delta.text})]
        if isinstance(delta, Reasoning):
            self.reasoning.append(delta.text)
            return [self._chunk({"reasoning_content": delta.text})]
        if isinstance(delta, Item | Block | Signature | Citation | CallEnd):
            return []  # a Responses item or Anthropic block chat has no form for
        if isinstance(delta, CallStart):
            self.calls[delta.key] = {"id": delta.call_id, "type": "function",
                                     "function": {"name": delta.name, "arguments": ""}}
            head = {"index": delta.key, "id": delta.call_id, "type": "function",
                    "function": {"name": delta.name, "arguments": ""}}
            return [self._chunk({"tool_calls": [head]})]
        self.calls[delta.key]["function"]["arguments"] += delta.text
        return [self._chunk({"tool_calls": [{"index": delta.key,
                                             "function": {"arguments": delta.text}}]})]

    def end_round(self) -> list[str]:
        """An upstream round ended and another continues the same answer: nothing to say."""
        return []

    def finish(self, finish_reason: str, usage: Usage) -> list[str]:
        """The finish chunk, the usage chunk when the client asked for it, ``[DONE]``. A
        client that did not ask still gets the usage, on the finish chunk (where DeepSeek,
        which always reports it, puts it; clients that read ``chunk.usage`` find it there,
        the others ignore the field)."""
        out = [self._chunk({}, finish_reason, None if self.include_usage else usage)]
        if self.include_usage:
            out.append(sse({"id": self.response_id, "object": "chat.completion.chunk",
                            "created": self.created, "model": self.model, "choices": [],
                            "usage": chat_usage(usage)}))
        return [*out, "data: [DONE]\n\n"]

    def body(self, finish_reason: str, usage: Usage) -> dict[str, Any]:
        """The whole ``chat.completion`` object (a non-streaming answer)."""
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(self.text) if self.text or not self.calls
                                   else None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [self.calls[k] for k in sorted(self.calls)]
        return {"id": self.response_id, "object": "chat.completion", "created": self.created,
                "model": self.model,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": finish_reason}],
                "usage": chat_usage(usage)}

    def error(self, payload: Mapping[str, Any]) -> list[str]:
        """A failure after the stream started: the error object as a chunk (clients such
        as the OpenAI SDK raise on a chunk with an ``error`` key); no ``[DONE]`` follows."""
        return [sse(payload)]
