"""The ``anthropic`` provider: the Anthropic Messages API (design §7.1; docs/providers.md).

What is sent (``POST {base}/v1/messages``, base ``https://api.anthropic.com``; DeepSeek's and
MiMo's Anthropic-format endpoints are other bases, e.g. ``https://api.deepseek.com/anthropic``):

* ``x-api-key`` and ``anthropic-version: 2023-06-01`` instead of ``Authorization: Bearer``
  (https://docs.anthropic.com/en/api/overview);
* ``tools`` (``input_schema``), ``system`` as text blocks and ``messages`` in transcript order
  (:mod:`ctxfold.interop.anthropic`: consecutive tool results in one user message, thinking
  blocks with their signatures and other kept blocks exactly as received), in that order —
  the order the API builds its cache prefix in;
* prompt-cache breakpoints placed by :func:`ctxfold.interop.anthropic.place_breakpoints`:
  the end of tools + system and the checkpoint's summary message with the configured TTL
  (``cache_ttl_minutes`` ≥ 60 → ``"1h"``, else ``"5m"``), the newest message with ``"5m"``;
  none below the model's minimum cacheable prefix;
* ``max_tokens``, required by this API: an explicit ``max_output_tokens``, else the output
  ladder (16K/32K/64K by effort) within the model's largest (64,000; Opus 4 / 4.1 32,000;
  the Claude 3 models 4,096 or 8,192: :data:`MAX_OUTPUTS`), clipped to what the window
  leaves;
* effort ``none`` or a Claude 3 model but Sonnet 3.7: no thinking; otherwise, for Claude
  4.6 and later, ``thinking: {"type": "adaptive"}`` and ``output_config: {"effort": ...}``
  (https://platform.claude.com/docs/en/build-with-claude/effort), for older Claude models and
  other endpoints ``thinking: {"type": "enabled", "budget_tokens": ...}``
  (:func:`thinking_fields`);
* ``stream``.

The reply is assembled from ``message_start``, ``content_block_start``/``_delta``
(``text_delta``, ``input_json_delta``, ``thinking_delta``, ``signature_delta``,
``citations_delta``)/``_stop``, ``message_delta`` (stop reason, usage) and ``message_stop``
(https://docs.anthropic.com/en/docs/build-with-claude/streaming); the assistant message keeps
every block as received, so thinking and its signature go back out exactly. Usage: input +
cache writes + cache reads is the prompt. Errors are ``{"type": "error", "error": {"type":
"overloaded_error", ...}}`` bodies: 529 (overloaded) is retried like 503, 429 honours
``retry-after``, and "prompt is too long: N tokens > M maximum" is the overflow error with
its numbers (:mod:`ctxfold.transport`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxfold.interop.anthropic import (
    from_anthropic,
    place_breakpoints,
    tool_to_anthropic,
    usage_from_anthropic,
    wire_of,
)
from ctxfold.interop.chat import dumps
from ctxfold.kernel.errors import MessageError
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import ProviderDefaults, ProviderOptions, StrategyContext, StrategySpec
from ctxfold.kernel.summary import is_summary_message
from ctxfold.kernel.types import ChatRequest, ChatResponse, Message, ToolCall
from ctxfold.message_checks import repair_surrogates
from ctxfold.transport.errors import (
    bad_payload,
    error_from_payload,
    load_json,
    stream_cut,
    stream_event,
)
from ctxfold.transport.provider import (
    HttpProvider,
    build_http_provider,
    ladder_budget,
    output_budget,
)

NAME = "anthropic"
#: The largest ``max_tokens`` Claude Sonnet 4.6 and Haiku 4.5 accept (64K, the models
#: overview, https://docs.anthropic.com/en/docs/about-claude/models/overview); a larger value
#: is refused, so the ladder's 64Ki step is clipped to it.
MAX_OUTPUT = 64_000
#: The largest ``max_tokens`` of the models that accept less than :data:`MAX_OUTPUT`, by
#: model-id fragment, first match wins (the models overview's "Max output" row,
#: https://docs.anthropic.com/en/docs/about-claude/models/overview: Claude Opus 4 and 4.1
#: 32,000; Claude Sonnet 3.7 64,000; Claude Haiku 3.5 and Sonnet 3.5 8,192; Claude Haiku 3,
#: Opus 3 and Sonnet 3 4,096). ``claude-opus-4-20250514`` is "opus-4-2025…", its alias
#: ``claude-opus-4-0``.
MAX_OUTPUTS = (("opus-4-0", 32_000), ("opus-4-2025", 32_000), ("opus-4-1", 32_000),
               ("claude-3-7", 64_000), ("claude-3-5-", 8_192), ("claude-3-", 4_096))


def max_output(model: str) -> int:
    """The largest ``max_tokens`` ``model`` accepts (:data:`MAX_OUTPUTS`, else
    :data:`MAX_OUTPUT`)."""
    for family, tokens in MAX_OUTPUTS:
        if family in model:
            return tokens
    return MAX_OUTPUT


def declared_ladder(effort: str) -> int:
    """The output ladder (16K / 32K / 64K by effort) within the largest output any current
    model accepts (:data:`MAX_OUTPUT`)."""
    return min(ladder_budget(effort), MAX_OUTPUT)


def output_ladder(effort: str, model: str = "") -> int:
    """The output ladder (16K / 32K / 64K by effort) within what ``model`` accepts
    (:func:`max_output`; no model: the declared one)."""
    return DEFAULTS.auto_budget(effort, model)


#: What Anthropic declares: Claude Sonnet 4.6 with its 200K window, the cache's default 5
#: minutes (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching), the output
#: ladder for the required ``max_tokens``, and the API's own key and version headers.
DEFAULTS = ProviderDefaults(
    model="claude-sonnet-4-6",
    context_window=200_000,
    cache_ttl_minutes=5,
    base_url="https://api.anthropic.com",
    api_key_env="ANTHROPIC_API_KEY",
    output_budget=declared_ladder,
    max_output=max_output,
    output_field="max_tokens",
    request_id_headers=("request-id", "x-request-id"),
    headers={"anthropic-version": "2023-06-01"},
    key_header="x-api-key",
    key_prefix="",
)
#: The smallest prefix Anthropic caches, by model family (the prompt-caching page's table;
#: a prefix below it is processed uncached, without an error). Users have observed 2048
#: for Sonnet 4.6 (https://github.com/anthropics/anthropic-sdk-python/issues/1194): a mark
#: between the two only costs a breakpoint slot.
CACHE_MINIMUMS = (("opus-4-5", 4096), ("opus-4-6", 4096), ("haiku-4-5", 4096),
                  ("3-haiku", 2048), ("3-5-haiku", 2048))
DEFAULT_CACHE_MINIMUM = 1024
_EFFORTS = frozenset({"low", "medium", "high", "max"})
#: Anthropic stop reasons as ctxfold finish reasons (others, e.g. ``refusal`` and
#: ``pause_turn``, are kept as they are).
STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
                "max_tokens": "length", "model_context_window_exceeded": "length"}


#: Claude models with manual extended thinking only (``budget_tokens``), no adaptive
#: thinking and no ``output_config.effort`` without a beta header: Claude Sonnet 3.7 and
#: the 4.x models before 4.6 (``claude-sonnet-4-20250514`` is "sonnet-4-2…", the aliases
#: end in "-4-0").
BUDGET_THINKING_MODELS = ("claude-3-7", "sonnet-4-0", "sonnet-4-2", "opus-4-0", "opus-4-2",
                          "opus-4-1", "sonnet-4-5", "haiku-4-5", "opus-4-5")
#: Claude models without extended thinking: the Claude 3 family but Sonnet 3.7 (the models
#: overview's "Extended thinking" row,
#: https://docs.anthropic.com/en/docs/about-claude/models/overview); they refuse ``thinking``.
NO_THINKING_MODELS = ("claude-3-haiku", "claude-3-opus", "claude-3-sonnet", "claude-3-5-")
#: ``budget_tokens`` by effort for manual extended thinking (at least 1,024, below
#: ``max_tokens``).
THINKING_BUDGETS = {"low": 4_096, "medium": 10_240, "high": 20_480, "max": 32_768}


def thinking_fields(model: str, effort: str, max_tokens: int) -> dict[str, Any]:
    """The thinking fields for ``effort`` (``none``: none).

    Claude 3 models but Sonnet 3.7 (:data:`NO_THINKING_MODELS`): none, they have no extended
    thinking. Claude 4.6 and later: ``thinking: {"type": "adaptive"}`` and ``output_config.effort``
    (manual thinking is deprecated there and removed in later models,
    https://platform.claude.com/docs/en/build-with-claude/thinking). Older Claude
    models (:data:`BUDGET_THINKING_MODELS`): ``{"type": "enabled", "budget_tokens": N}``. Other
    models — DeepSeek's and MiMo's Anthropic-format endpoints — get the manual form, which
    every Anthropic-format endpoint reads, and ``output_config.effort``, which DeepSeek's
    uses (https://api-docs.deepseek.com/guides/anthropic_api). The budget stays at least
    1,024 and below ``max_tokens``, as the API requires; with less room, no thinking."""
    if effort == "none" or any(family in model for family in NO_THINKING_MODELS):
        return {}
    effort = effort if effort in _EFFORTS else "high"
    claude = "claude" in model
    if claude and not any(family in model for family in BUDGET_THINKING_MODELS):
        return {"thinking": {"type": "adaptive"}, "output_config": {"effort": effort}}
    budget = min(THINKING_BUDGETS[effort], max_tokens // 2)
    if budget < 1024:
        return {}
    fields: dict[str, Any] = {"thinking": {"type": "enabled", "budget_tokens": budget}}
    if not claude:
        fields["output_config"] = {"effort": effort}
    return fields


def cache_minimum(model: str) -> int:
    """The minimum cacheable prefix of ``model``, in tokens."""
    for family, tokens in CACHE_MINIMUMS:
        if family in model:
            return tokens
    return DEFAULT_CACHE_MINIMUM


def approximate_tokens(value: Any) -> int:
    """About four characters of JSON per token: enough to tell a prefix below the cache
    minimum from one above it (an estimate that is off only moves a breakpoint's threshold)."""
    return len(dumps(value)) // 4


def cache_ttl(minutes: int) -> str:
    """The breakpoint TTL for a provider cache of ``minutes``: ``"1h"`` from an hour on."""
    return "1h" if minutes >= 60 else "5m"


def checkpoint_index(messages: Sequence[Message]) -> int | None:
    """The position of the checkpoint's summary message (``origin="host"``), if any."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.origin == "host" and not m.local_only and is_summary_message(m):
            return i
    return None


def with_breakpoints(body: dict[str, Any], messages: Sequence[Message],
                     positions: Sequence[int | None], *, ttl: str,
                     count: Callable[[Any], int]) -> dict[str, Any]:
    """``body`` (built from ``messages``; ``positions``: where each landed in
    ``body["messages"]``, :func:`~ctxfold.interop.anthropic.wire_of`) with ctxfold's
    breakpoints: the checkpoint's summary found among ``messages``, the minimum of
    ``body["model"]`` (:func:`~ctxfold.interop.anthropic.place_breakpoints`). The provider and
    the proxy's Anthropic upstream place them with this one rule."""
    at = checkpoint_index(messages)
    return place_breakpoints(body, ttl=ttl, min_tokens=cache_minimum(str(body["model"])),
                             count=count, checkpoint=None if at is None else positions[at])


class AnthropicTranslator:
    """Translator for ``POST {base}/v1/messages``; ``ttl`` is the stable breakpoints'
    cache TTL, ``count`` what sizes a prefix against the model's cache minimum."""

    name = NAME
    path = "/v1/messages"

    def __init__(self, *, ttl: str = "5m",
                 count: Callable[[Any], int] = approximate_tokens) -> None:
        self.ttl = ttl
        self.count = count

    def build_body(self, request: ChatRequest, *, model: str) -> dict[str, Any]:
        """Tools, system and messages first (the cache prefix order), then what varies."""
        wire = wire_of(request.messages)
        body: dict[str, Any] = {"model": model}
        if request.tools:
            body["tools"] = [tool_to_anthropic(t) for t in request.tools]
        if wire.system:
            body["system"] = wire.system
        body["messages"] = wire.messages
        budget = output_budget(request, DEFAULTS, model)
        assert budget is not None  # DEFAULTS never omits max_tokens: the API requires it
        body["max_tokens"] = budget
        body.update(thinking_fields(model, request.effort, body["max_tokens"]))
        body["stream"] = request.stream
        return with_breakpoints(body, request.messages, wire.positions, ttl=self.ttl,
                                count=self.count)

    def parse_response(self, data: Any, request_id: str) -> ChatResponse:
        """Parse a non-streaming ``message`` object."""
        if isinstance(data, Mapping) and data.get("type") == "error":
            raise error_from_payload(NAME, data, "the response reported an error")
        if not isinstance(data, Mapping) or not isinstance(data.get("content"), list):
            raise bad_payload(NAME, "the message response", str(data))
        stream = AnthropicStream()
        stream.start(data)
        for index, block in enumerate(data["content"]):
            stream.block_start(index, block)
        stream.stop_reason = data.get("stop_reason")
        stream.stop_sequence = data.get("stop_sequence")
        stream.stopped = True
        return stream.finish(request_id)

    def new_stream(self) -> AnthropicStream:
        """A fresh assembler."""
        return AnthropicStream()


class AnthropicStream:
    """Assembles Messages streaming events; complete at ``message_stop``."""

    def __init__(self) -> None:
        #: The content blocks by index, as started and grown by their deltas.
        self.blocks: dict[int, dict[str, Any]] = {}
        #: ``input_json_delta`` pieces by block index (tool_use, server_tool_use).
        self.json: dict[int, list[str]] = {}
        self.usage: dict[str, Any] = {}
        self.stop_reason: Any = None
        self.stop_sequence: Any = None
        self.message_id = ""
        self.stopped = False

    def feed(self, event: Any) -> bool:
        """Consume one SSE event; True at ``message_stop``."""
        typed = stream_event(NAME, event)
        if typed is None:
            return False
        kind, payload = typed
        data = event.data.strip()
        if kind == "message_start":
            message = payload.get("message")
            if not isinstance(message, Mapping):
                raise bad_payload(NAME, "the message_start event", data)
            self.start(message)
        elif kind == "content_block_start":
            self.block_start(_index(payload, data), payload.get("content_block"))
        elif kind == "content_block_delta":
            self.delta(_index(payload, data), payload.get("delta"), data)
        elif kind == "content_block_stop":
            self.block_stop(_index(payload, data))
        elif kind == "message_delta":
            delta = payload.get("delta")
            if isinstance(delta, Mapping) and delta.get("stop_reason") is not None:
                self.stop_reason = delta["stop_reason"]
                self.stop_sequence = delta.get("stop_sequence")
            self._usage(payload.get("usage"))
        elif kind == "message_stop":
            self.stopped = True
            return True
        return False  # ping and event types added later

    def start(self, message: Mapping[str, Any]) -> None:
        """Record the message id and its first usage (input and cache counts)."""
        self.message_id = str(message.get("id") or "")
        self._usage(message.get("usage"))

    def _usage(self, usage: Any) -> None:
        # message_delta's usage is cumulative: its non-null counts replace message_start's.
        if isinstance(usage, Mapping):
            self.usage.update({k: v for k, v in usage.items() if v is not None})

    def block_start(self, index: int, block: Any) -> None:
        """A block begins (in a non-streaming answer: the whole block)."""
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise bad_payload(NAME, "a content block", json.dumps(block))
        self.blocks[index] = dict(block)

    def delta(self, index: int, delta: Any, data: str) -> None:
        """Grow block ``index`` by one delta."""
        block = self.blocks.get(index)
        if block is None or not isinstance(delta, Mapping):
            raise bad_payload(NAME, "a content_block_delta event", data)
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = str(block.get("text") or "") + str(delta.get("text") or "")
        elif kind == "thinking_delta":
            block["thinking"] = (str(block.get("thinking") or "")
                                 + str(delta.get("thinking") or ""))
        elif kind == "signature_delta":
            block["signature"] = (str(block.get("signature") or "")
                                  + str(delta.get("signature") or ""))
        elif kind == "input_json_delta":
            self.json.setdefault(index, []).append(str(delta.get("partial_json") or ""))
        elif kind == "citations_delta":
            block["citations"] = [*(block.get("citations") or ()), delta.get("citation")]

    def block_stop(self, index: int) -> None:
        """A block ends: its ``input_json_delta`` pieces become its ``input``."""
        pieces = self.json.pop(index, None)
        block = self.blocks.get(index)
        if block is None or pieces is None:
            return
        text = "".join(pieces)
        block["input"] = load_json(NAME, "a tool_use block's input", text) if text.strip() \
            else {}

    def _content(self) -> list[dict[str, Any]]:
        return [_repaired(self.blocks[i]) for i in sorted(self.blocks)]

    def partial(self) -> Message | None:
        """What arrived so far, marked partial (blocks are not kept: they may be cut)."""
        if not self.blocks:
            return None
        texts, thinking, calls = [], [], []
        for i in sorted(self.blocks):
            block = self.blocks[i]
            if block["type"] == "text":
                texts.append(str(block.get("text") or ""))
            elif block["type"] == "thinking":
                thinking.append(str(block.get("thinking") or ""))
            elif block["type"] == "tool_use":
                arguments = ("".join(self.json[i]) if i in self.json
                             else dumps(block.get("input") or {}))
                calls.append(ToolCall(id=str(block.get("id") or ""),
                                      name=str(block.get("name") or ""),
                                      arguments=repair_surrogates(arguments)))
        return Message(role="assistant", content=repair_surrogates("".join(texts)),
                       reasoning_content=repair_surrogates("".join(thinking)) or None,
                       tool_calls=tuple(calls), partial=True)

    def finish(self, request_id: str) -> ChatResponse:
        """The full response; without ``message_stop`` the stream was cut off."""
        if not self.stopped:
            raise stream_cut(NAME, "message_stop")
        try:
            [message] = from_anthropic(None, [{"role": "assistant",
                                               "content": self._content()}],
                                       where="response")
        except MessageError as exc:
            raise bad_payload(NAME, "the assembled message", str(exc)) from None
        reason = self.stop_reason
        finish = STOP_REASONS.get(reason, reason) if isinstance(reason, str) else (
            "tool_calls" if message.tool_calls else "stop")
        matched = (str(self.stop_sequence or "") if reason == "stop_sequence" else None)
        return ChatResponse(message=message, finish_reason=finish,
                            usage=usage_from_anthropic(self.usage),
                            request_id=request_id or self.message_id, stop_sequence=matched)


def _index(payload: Mapping[str, Any], data: str) -> int:
    index = payload.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        raise bad_payload(NAME, "a content block event without an index", data)
    return index


def _repaired(value: Any) -> Any:
    """``value`` with surrogate halves joined (an emoji split across two deltas)."""
    if isinstance(value, str):
        return repair_surrogates(value)
    if isinstance(value, dict):
        return {k: _repaired(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_repaired(v) for v in value]
    return value


def create(context: StrategyContext[ProviderOptions]) -> HttpProvider:
    """Factory: an :class:`HttpProvider` for the Anthropic Messages API from ``[provider]``
    (the stable breakpoints' TTL from ``cache_ttl_minutes``)."""
    minutes = context.config.provider.cache_ttl_minutes or DEFAULTS.cache_ttl_minutes
    return build_http_provider(context, AnthropicTranslator(ttl=cache_ttl(minutes)), DEFAULTS)


@hookimpl
def ctxfold_providers() -> list[StrategySpec]:
    """Register the ``anthropic`` provider."""
    return [StrategySpec(name=NAME, factory=create, defaults=DEFAULTS,
                         description="Anthropic Messages API (api.anthropic.com/v1/messages)")]
