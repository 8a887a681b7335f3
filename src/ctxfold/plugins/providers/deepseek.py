"""The ``deepseek`` provider: DeepSeek chat completions (design §7.1; docs/providers.md).

What is sent (``POST {base}/chat/completions``):

* ``max_tokens`` only when ``max_output_tokens`` > 0 — at 0 the field is omitted so the
  server default applies (8K non-thinking, 64K thinking, 128K at effort ``max``; the cap
  is 384K);
* effort ``none`` → ``thinking: {"type": "disabled"}``; otherwise ``reasoning_effort``
  ``low``/``high``/``max`` (``medium`` is sent as ``high``, which is what DeepSeek maps it to);
* ``reasoning_content`` replayed on assistant turns that made tool calls, nowhere else;
* ``stream_options.include_usage``; usage is read from the finish chunk or a trailing
  usage-only chunk, hits/misses from ``prompt_cache_hit_tokens``/``prompt_cache_miss_tokens``.

Overflow is HTTP 400 with "maximum context length is …" and ``code: invalid_request_error``
(not ``context_length_exceeded``), parsed by :mod:`ctxfold.transport.overflow`.
"""

from __future__ import annotations

from typing import Any

from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import ProviderDefaults, ProviderOptions, StrategyContext, StrategySpec
from ctxfold.kernel.types import ChatRequest
from ctxfold.plugins.providers._chat import ChatCompletionsTranslator
from ctxfold.transport.provider import HttpProvider, build_http_provider, output_budget


def server_default_max_tokens(effort: str) -> int:
    """DeepSeek's ``max_tokens`` when the field is omitted: 8K non-thinking, 64K thinking,
    128K at effort ``max`` (https://api-docs.deepseek.com/api/create-chat-completion)."""
    if effort == "none":
        return 8_192
    return 131_072 if effort == "max" else 65_536


#: What DeepSeek declares: V4 flash, a 1M window (errors report 1048576), a 24 h cache
#: (https://api-docs.deepseek.com/quick_start/pricing, .../guides/kv_cache), the server's own
#: output default with the field omitted, and its request-id headers.
DEFAULTS = ProviderDefaults(
    model="deepseek-flash",
    context_window=1_048_576,
    cache_ttl_minutes=24 * 60,
    base_url="https://api.deepseek.com",
    api_key_env="DEEPSEEK_API_KEY",
    output_budget=server_default_max_tokens,
    omit_output_field=True,
    output_field="max_tokens",
    request_id_headers=("x-request-id", "x-deepseek-request-id", "request-id"),
)
_EFFORT = {"low": "low", "medium": "high", "high": "high", "max": "max"}


class DeepSeekTranslator(ChatCompletionsTranslator):
    """Chat completions with DeepSeek's output budget and thinking fields."""

    name = "deepseek"
    #: Text and images only: DeepSeek lists vision for deepseek-flash and documents no
    #: audio or file input (https://api-docs.deepseek.com/quick_start/pricing).
    part_types = frozenset({"text", "image_url"})

    def budget_fields(self, request: ChatRequest) -> dict[str, Any]:
        """``max_tokens`` for a positive user cap (clipped to the window's output room); at 0
        the field is omitted, unless the room left in the window is smaller than the server's
        own default for this effort: then the clipped value is sent."""
        budget = output_budget(request, DEFAULTS)
        return {} if budget is None else {DEFAULTS.output_field: budget}

    def thinking_fields(self, request: ChatRequest) -> dict[str, Any]:
        """``none`` turns thinking off; other efforts pick the reasoning depth."""
        if request.effort == "none":
            return {"thinking": {"type": "disabled"}}
        return {"reasoning_effort": _EFFORT.get(request.effort, "high")}


def create(context: StrategyContext[ProviderOptions]) -> HttpProvider:
    """Factory: an :class:`HttpProvider` for DeepSeek from ``[provider]``."""
    return build_http_provider(context, DeepSeekTranslator(), DEFAULTS)


@hookimpl
def ctxfold_providers() -> list[StrategySpec]:
    """Register the ``deepseek`` provider."""
    return [StrategySpec(name="deepseek", factory=create, defaults=DEFAULTS,
                         description="DeepSeek chat completions (api.deepseek.com)")]
