"""``ctxfold replay --summarizer-provider NAME``: every policy's summaries from one real model.

The offline replay writes every summary with the ``extractive`` summarizer. With a provider
named, each summary request of every policy goes to that provider once, through the ``llm``
summarizer (reasoning effort ``none``, no retry): ctxfold's and the ``-like`` policies'
cache-aligned requests as they are, the real libraries' as the one prompt the library itself
sends its model. The key is the provider's own (e.g. ``DEEPSEEK_API_KEY`` for ``deepseek``),
and a spend cap (``--max-usd``, priced with the replay's profile) refuses any request whose
worst case — its prompt at the miss price plus its whole output allowance — would pass it;
the run then stops with :class:`SpendCapError`.
"""

from __future__ import annotations

from typing import Any

import attrs

from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import Estimator
from ctxfold.kernel.errors import ConfigError, CtxfoldError
from ctxfold.kernel.kinds import PROVIDER
from ctxfold.kernel.registry import Registry
from ctxfold.kernel.types import ChatRequest, ChatResponse, RequestShape, Usage
from ctxfold.replay.pricing import Price


class SpendCapError(CtxfoldError):
    """A replay with a real summarizer stopped before a summary request that could pass its
    spend cap (``--max-usd``); names the spend so far."""


#: The default spend cap of a replay with a real summarizer (USD).
DEFAULT_MAX_USD = 1.00


class MeteredProvider:
    """A provider that refuses a request whose worst-case price would pass ``max_usd``."""

    def __init__(self, inner: Any, price: Price, max_usd: float, estimator: Estimator) -> None:
        self.inner = inner
        self.price = price
        self.max_usd = max_usd
        self.estimator = estimator
        self.spent = 0.0
        self.requests = 0
        self.refused: SpendCapError | None = None
        self.name = inner.name
        self.context_window = inner.context_window
        self.cache_ttl_minutes = inner.cache_ttl_minutes

    def cost(self, usage: Usage) -> float:
        hit = usage.cache_hit_tokens
        miss = usage.cache_miss_tokens or max(0, usage.prompt_tokens - hit)
        return self.price.cost(hit, miss, usage.completion_tokens)

    def complete(self, request: ChatRequest) -> ChatResponse:
        if self.refused is not None:
            raise self.refused
        prompt = self.estimator.estimate(RequestShape(list(request.messages),
                                                      list(request.tools)))
        worst = self.price.cost(0, prompt, request.max_output_tokens or 8192)
        if self.spent + worst > self.max_usd:
            self.refused = SpendCapError(
                f"replay: spend cap: summary request {self.requests + 1} (~{prompt:,} prompt "
                f"tokens) could cost up to ${worst:.4f}; spent ${self.spent:.4f} of --max-usd "
                f"{self.max_usd:.2f}; not sent. Raise --max-usd, or replay fewer sessions or a "
                "larger window (fewer summaries).")
            raise self.refused
        self.requests += 1
        response: ChatResponse = self.inner.complete(request)
        self.spent += self.cost(response.usage)
        return response

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


def live_summarizer(name: str, config: Config, registry: Registry, price: Price,
                    max_usd: float, estimator: Estimator) -> tuple[Any, MeteredProvider]:
    """The ``llm`` summarizer over provider ``name`` behind a spend cap, and its meter."""
    from ctxfold.plugins.summarizers.llm import LLMSummarizer

    if name not in registry.names(PROVIDER.name):
        raise ConfigError(f"--summarizer-provider {name!r}: unknown provider; available: "
                          f"{', '.join(registry.names(PROVIDER.name))}")
    if max_usd <= 0:
        raise ConfigError(f"--max-usd {max_usd}: must be above 0")
    chosen = attrs.evolve(config, provider=attrs.evolve(config.provider, name=name, model="",
                                                        base_url="", api_key_env=""))
    resolved = registry.resolve(chosen)
    provider = registry.create(PROVIDER, name, config=resolved)
    meter = MeteredProvider(provider, price, max_usd, estimator)
    return LLMSummarizer(meter, model=resolved.summarizer.model or resolved.provider.model), meter
