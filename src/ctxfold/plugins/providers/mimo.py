"""The ``mimo`` provider: Xiaomi MiMo OpenAI-compatible chat completions (providers.md §2).

What is sent (``POST {base}/chat/completions``, base ``https://api.xiaomimimo.com/v1``):

* ``max_completion_tokens`` (MiMo's documented field; it bounds thinking + answer): an
  explicit ``max_output_tokens`` wins, else the ladder 16K (effort ``none``), 32K
  (``low``/``medium``), 64K (``high``/``max``);
* ``thinking: {"type": "disabled"}`` for effort ``none``, else ``{"type": "enabled"}`` —
  always explicit, because the default differs per model (off for ``mimo-v2-flash``);
  MiMo has no effort gradation on chat completions;
* ``reasoning_content`` replayed on assistant turns that made tool calls (400 otherwise);
* ``stream_options.include_usage``; usage (``prompt_tokens_details.cached_tokens``, may be
  null) can arrive after the finish chunk, so the stream is read to ``[DONE]``.

MiMo has no documented overflow body; 400s are parsed generically. An error object inside
a 200 stream chunk is raised as a typed error.
"""

from __future__ import annotations

from typing import Any

from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import ProviderDefaults, ProviderOptions, StrategyContext, StrategySpec
from ctxfold.kernel.types import ChatRequest
from ctxfold.plugins.providers._chat import ChatCompletionsTranslator
from ctxfold.transport.provider import (
    HttpProvider,
    build_http_provider,
    ladder_budget,
    output_budget,
)

#: What MiMo declares. The pricing page prices mimo-v2.5-pro up to 1M input, but whether a
#: plain model id gets 1M or 256K is not documented
#: (https://platform.xiaomimimo.com/docs/en-US/pricing): 256K is assumed, so compaction starts
#: early rather than after an overflow; set ``[provider] context_window`` for the 1M tier.
DEFAULTS = ProviderDefaults(
    model="mimo-v2.5-pro",
    context_window=262_144,
    cache_ttl_minutes=24 * 60,
    base_url="https://api.xiaomimimo.com/v1",
    api_key_env="MIMO_API_KEY",
    output_budget=ladder_budget,
)


class MiMoTranslator(ChatCompletionsTranslator):
    """Chat completions with MiMo's output ladder and thinking switch."""

    name = "mimo"

    def budget_fields(self, request: ChatRequest) -> dict[str, Any]:
        """``max_completion_tokens`` from the ladder (explicit values win)."""
        return {DEFAULTS.output_field: output_budget(request, DEFAULTS)}

    def thinking_fields(self, request: ChatRequest) -> dict[str, Any]:
        """Thinking on unless effort is ``none``."""
        return {"thinking": {"type": "disabled" if request.effort == "none" else "enabled"}}


def create(context: StrategyContext[ProviderOptions]) -> HttpProvider:
    """Factory: an :class:`HttpProvider` for MiMo from ``[provider]``."""
    return build_http_provider(context, MiMoTranslator(), DEFAULTS)


@hookimpl
def ctxfold_providers() -> list[StrategySpec]:
    """Register the ``mimo`` provider."""
    return [StrategySpec(name="mimo", factory=create, defaults=DEFAULTS,
                         description="Xiaomi MiMo chat completions (api.xiaomimimo.com)")]
