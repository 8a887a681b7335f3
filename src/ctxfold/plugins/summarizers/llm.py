"""The ``llm`` summarizer: one request through the configured provider (design §4.4).

The request is the cache-aligned :class:`~ctxfold.kernel.contracts.SummaryRequest` sent as
it is, with reasoning effort forced to ``none`` (origin #9613/#9778: reasoning-first models
spent the whole output cap thinking and returned an empty summary) and ``max_output_tokens``
set to the summary cap. Exactly one call: no retry, no fallback text; provider errors
propagate to the engine, which records a failed receipt and installs nothing.
"""

from __future__ import annotations

import asyncio

from ctxfold.kernel.contracts import AsyncProvider, Provider
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import PROVIDER, StrategyContext, StrategySpec, SummarizerOptions
from ctxfold.kernel.types import ChatRequest, ChatResponse, SummaryRequest, SummaryResult


class LLMSummarizer:
    """A :class:`ctxfold.kernel.contracts.Summarizer` backed by a :class:`Provider`.

    ``model`` empty means the provider's model; ``[summarizer] model`` may name a cheaper one
    (at the price of a cold prefix cache).
    """

    name = "llm"

    def __init__(self, provider: Provider, model: str = "") -> None:
        self.provider = provider
        self.model = model

    def chat_request(self, request: SummaryRequest) -> ChatRequest:
        """The provider request for ``request`` (exposed so tests and tooling can inspect it)."""
        return ChatRequest(
            messages=request.messages,
            tools=request.tools,
            model=self.model,
            max_output_tokens=request.max_tokens,
            effort="none",
            stream=True,
            cache_key=request.cache_key,
            max_retries=0,  # exactly one call (design §4.4): no transport retry either
        )

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Send exactly one request and return its text; provider errors propagate."""
        return _result(self.provider.complete(self.chat_request(request)))

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        """:meth:`summarize` without blocking the event loop."""
        provider = self.provider
        if isinstance(provider, AsyncProvider):
            return _result(await provider.acomplete(self.chat_request(request)))
        return await asyncio.to_thread(self.summarize, request)


def _result(response: ChatResponse) -> SummaryResult:
    return SummaryResult(text=response.message.content, finish_reason=response.finish_reason,
                         usage=response.usage)


def _factory(context: StrategyContext[SummarizerOptions]) -> LLMSummarizer:
    # The engine passes its own provider in options.provider so the summary shares the
    # session's HTTP client and retry policy; otherwise build the configured one.
    config = context.config
    provider = context.options.provider
    if provider is None:
        provider = context.registry.create(PROVIDER, config.provider.name, config=config)
    return LLMSummarizer(provider, model=config.summarizer.model or config.provider.model)


@hookimpl
def ctxfold_summarizers() -> list[StrategySpec]:
    """Register the ``llm`` summarizer."""
    return [
        StrategySpec(
            name="llm",
            calls_provider=True, default=True,
            factory=_factory,
            description="one request to the configured provider, effort none, no retry",
        )
    ]
