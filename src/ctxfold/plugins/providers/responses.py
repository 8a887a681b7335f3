"""The ``responses`` provider: the OpenAI Responses API (design §7.1; docs/providers.md).

What is sent (``POST {base}/responses``, base ``https://api.openai.com/v1``):

* ``input`` items in transcript order: each message as ``{"type": "message", "role",
  "content"}`` (the system prompt included, as role ``system``), an assistant's tool calls as
  ``function_call`` items (``call_id``, ``name``, ``arguments``), tool results as
  ``function_call_output`` (``call_id``, ``output``). The system prompt stays in ``input``
  rather than ``instructions`` so the request is an append-only image of the transcript and an
  explicit cache breakpoint can be put on it later (``instructions`` is a plain string that
  cannot carry one); ``system`` rather than ``developer`` because DeepSeek's Responses
  endpoint treats ``developer`` as ``user``.
* ``max_output_tokens`` from the ladder (16K/32K/64K; explicit values win; it includes
  reasoning tokens), ``reasoning: {"effort": ...}``, ``store: false``, and
  ``prompt_cache_key`` from ``ChatRequest.cache_key``.
* Reasoning is not replayed: with ``store: false`` only ``encrypted_content`` could be, and
  ctxfold's transcript keeps reasoning as text.

Usage comes from ``response.completed`` (``input_tokens_details.cached_tokens``); overflow is
``context_length_exceeded`` in an HTTP 400 body or an in-stream ``error`` event. Native
(server-side) compaction is not used.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ctxfold.interop.responses import input_items, kept_item, tool_item
from ctxfold.interop.usage import responses_usage
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import ProviderDefaults, ProviderOptions, StrategyContext, StrategySpec
from ctxfold.kernel.types import ChatRequest, ChatResponse, Message, ToolCall
from ctxfold.message_checks import repaired_message
from ctxfold.transport.errors import (
    bad_payload,
    error_from_payload,
    stream_cut,
    stream_event,
)
from ctxfold.transport.provider import (
    HttpProvider,
    build_http_provider,
    ladder_budget,
    output_budget,
)

#: What OpenAI declares here: gpt-5.5 with a 400K window (the gpt-5 family's; newer models
#: may be larger — set ``[provider] context_window``), the in-memory cache's 10 minutes
#: (https://platform.openai.com/docs/guides/prompt-caching), the output ladder, and OpenAI's
#: own BPE (``tiktoken``) for counting.
DEFAULTS = ProviderDefaults(
    model="gpt-5.5",
    context_window=400_000,
    cache_ttl_minutes=10,
    base_url="https://api.openai.com/v1",
    api_key_env="OPENAI_API_KEY",
    output_budget=ladder_budget,
    estimator="tiktoken",
)
NAME = "responses"


class ResponsesTranslator:
    """Translator for ``POST {base}/responses``."""

    name = NAME
    path = "/responses"

    def build_body(self, request: ChatRequest, *, model: str) -> dict[str, Any]:
        """``input`` right after ``model`` so successive turns extend the same bytes."""
        body: dict[str, Any] = {"model": model, "input": input_items(request.messages)}
        if request.tools:
            body["tools"] = [tool_item(t) for t in request.tools]
        body["max_output_tokens"] = output_budget(request, DEFAULTS)
        body["reasoning"] = {"effort": request.effort}
        body["store"] = False
        if request.cache_key:
            body["prompt_cache_key"] = request.cache_key
        body["stream"] = request.stream
        return body

    def parse_response(self, data: Any, request_id: str) -> ChatResponse:
        """Parse a non-streaming ``response`` object."""
        if not isinstance(data, Mapping) or not isinstance(data.get("output", []), list):
            raise bad_payload(NAME, "the response object", str(data))
        if data.get("status") == "failed" or (data.get("error") and not data.get("output")):
            raise error_from_payload(NAME, data.get("error") or data, "the response failed")
        stream = ResponsesStream()
        for index, item in enumerate(data.get("output") or ()):
            stream.item_done(index, item, from_body=True)
        stream.terminal(data)
        return stream.finish(request_id)

    def new_stream(self) -> ResponsesStream:
        """A fresh assembler."""
        return ResponsesStream()


class ResponsesStream:
    """Assembles Responses streaming events; complete at ``response.completed`` or
    ``response.incomplete`` (a ``[DONE]`` line is tolerated but not required)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[Any, dict[str, Any]] = {}
        self.usage: Any = None
        self.finish_reason: str | None = None
        self.response_id = ""
        #: Every finished output item, as sent (encrypted reasoning, item ids, item types
        #: ctxfold does not model): the message keeps them, so they go back out exactly.
        self.items: dict[Any, Mapping[str, Any]] = {}

    def feed(self, event: Any) -> bool:
        """Consume one SSE event; True at the terminal event."""
        if event.data.strip() == "[DONE]":
            return True
        typed = stream_event(NAME, event)
        if typed is None:
            return False
        kind, payload = typed
        data = event.data.strip()
        if kind == "response.output_text.delta":
            self.text.append(str(payload.get("delta") or ""))
        elif kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            self.reasoning.append(str(payload.get("delta") or ""))
        elif kind == "response.output_item.added":
            self._call_start(_key(payload), payload.get("item"))
        elif kind == "response.function_call_arguments.delta":
            slot = self.calls.setdefault(_key(payload), _slot())
            slot["arguments"].append(str(payload.get("delta") or ""))
        elif kind == "response.output_item.done":
            self.item_done(_key(payload), payload.get("item"))
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            response = payload.get("response")
            if not isinstance(response, Mapping):
                raise bad_payload(NAME, f"the {kind} event", data)
            if kind == "response.failed":
                raise error_from_payload(NAME, response.get("error") or response,
                                         "the response failed")
            self.terminal(response)
            return True
        return False

    def _call_start(self, key: Any, item: Any) -> None:
        if isinstance(item, Mapping) and item.get("type") == "function_call":
            slot = self.calls.setdefault(key, _slot())
            slot["call_id"] = str(item.get("call_id") or slot["call_id"])
            slot["name"] = str(item.get("name") or slot["name"])

    def item_done(self, key: Any, item: Any, *, from_body: bool = False) -> None:
        """A finished output item is authoritative over the deltas seen for it."""
        if not isinstance(item, Mapping):
            raise bad_payload(NAME, "an output item", json.dumps(item))
        self.items[key] = item
        kind = item.get("type")
        if kind == "function_call":
            self._call_start(key, item)
            if isinstance(item.get("arguments"), str):
                self.calls[key]["arguments"] = [item["arguments"]]
        elif kind == "message" and (from_body or not self.text):
            self.text.extend(_texts(item.get("content"), ("output_text",)))
        elif kind == "reasoning" and (from_body or not self.reasoning):
            self.reasoning.extend(_texts(item.get("summary"), ("summary_text",)))
            self.reasoning.extend(_texts(item.get("content"), ("reasoning_text",)))

    def terminal(self, response: Mapping[str, Any]) -> None:
        """Record usage and the finish reason from the final ``response`` object."""
        self.usage = response.get("usage")
        self.response_id = str(response.get("id") or "")
        if response.get("status") == "incomplete":
            reason = _get(response, "incomplete_details", "reason")
            self.finish_reason = "length" if reason == "max_output_tokens" else str(
                reason or "incomplete")
        else:
            self.finish_reason = "tool_calls" if self.calls else "stop"

    def _message(self, partial: bool) -> Message:
        calls = tuple(ToolCall(id=s["call_id"], name=s["name"], arguments="".join(s["arguments"]))
                      for s in self.calls.values())  # arrival order = output order
        # Joined here, not per event: a surrogate pair split across two deltas only becomes
        # one character once both halves are in the same string.
        kept = () if partial else tuple(kept_item(item) for item in self.items.values())
        return repaired_message(Message(
            role="assistant", content="".join(self.text), tool_calls=calls,
            reasoning_content="".join(self.reasoning) or None, partial=partial,
            responses_items=kept))

    def partial(self) -> Message | None:
        """What arrived so far, marked partial."""
        if not (self.text or self.reasoning or self.calls):
            return None
        return self._message(partial=True)

    def finish(self, request_id: str) -> ChatResponse:
        """The full response; without a terminal event the stream was cut off."""
        if self.finish_reason is None:
            raise stream_cut(NAME, "response.completed")
        return ChatResponse(message=self._message(partial=False),
                            finish_reason=self.finish_reason,
                            usage=responses_usage(self.usage),
                            request_id=request_id or self.response_id)


def _slot() -> dict[str, Any]:
    return {"call_id": "", "name": "", "arguments": []}


def _key(payload: Mapping[str, Any]) -> Any:
    index = payload.get("output_index")
    if isinstance(index, int):
        return index
    item = payload.get("item")
    return payload.get("item_id") or (item.get("id") if isinstance(item, Mapping) else "") or 0


def _texts(parts: Any, kinds: tuple[str, ...]) -> list[str]:
    if isinstance(parts, str):
        return [parts]
    return [str(p.get("text") or "") for p in parts or ()
            if isinstance(p, Mapping) and p.get("type") in kinds]


def _get(data: Mapping[str, Any], outer: str, inner: str) -> Any:
    value = data.get(outer)
    return value.get(inner) if isinstance(value, Mapping) else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def create(context: StrategyContext[ProviderOptions]) -> HttpProvider:
    """Factory: an :class:`HttpProvider` for the OpenAI Responses API from ``[provider]``."""
    return build_http_provider(context, ResponsesTranslator(), DEFAULTS)


@hookimpl
def ctxfold_providers() -> list[StrategySpec]:
    """Register the ``responses`` provider."""
    return [StrategySpec(name=NAME, factory=create, defaults=DEFAULTS,
                         description="OpenAI Responses API (api.openai.com/v1/responses)")]
