"""Summaries from a model the host chose: a ``summarize`` callable, and the rule that a
library host never gets checkpoint summaries from the loopback emulator by default.

A host that drives its own model passes ``summarize=fn`` to ``open_session``: ``fn`` receives
the :class:`~ctxfold.SummaryRequest` (cache-aligned messages, tools, ``max_tokens``;
``ctxfold.to_openai(request)`` gives its wire form) and returns the briefing text (or a
:class:`~ctxfold.SummaryResult`), synchronously or as an awaitable.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import AsyncSummarizer, Summarizer
from ctxfold.kernel.errors import ConfigError, CtxfoldError, SummarizerError
from ctxfold.kernel.kinds import SUMMARIZER
from ctxfold.kernel.registry import Registry
from ctxfold.kernel.types import SummaryRequest, SummaryResult
from ctxfold.message_checks import repair_surrogates
from ctxfold.secrets import redact_text

SummarizeFn = Callable[[SummaryRequest], "str | SummaryResult | Awaitable[str | SummaryResult]"]


def as_result(value: Any) -> SummaryResult:
    """A callable's answer as a :class:`SummaryResult`."""
    if isinstance(value, SummaryResult):
        return value
    if isinstance(value, str):
        return SummaryResult(text=value)
    raise SummarizerError(f"the summarize callable returned {type(value).__name__}; return "
                          "the briefing text (str) or a ctxfold.SummaryResult")


def _failed(exc: Exception) -> SummarizerError:
    return SummarizerError(f"the summarize callable raised {type(exc).__name__}: "
                           f"{redact_text(str(exc))[:300]}; nothing was installed")


class CallableSummarizer:
    """A :class:`~ctxfold.kernel.contracts.AsyncSummarizer` over the host's callable."""

    def __init__(self, fn: SummarizeFn) -> None:
        if not callable(fn):
            raise ConfigError(f"summarize must be callable, got {type(fn).__name__}")
        self.fn = fn

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        try:
            value = self.fn(request)
            if inspect.isawaitable(value):
                value = _run_awaitable(value)
        except CtxfoldError:
            raise
        except Exception as exc:
            raise _failed(exc) from exc
        return as_result(value)

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        try:
            value = self.fn(request)
            if inspect.isawaitable(value):
                value = await value
        except CtxfoldError:
            raise
        except Exception as exc:
            raise _failed(exc) from exc
        return as_result(value)


def _run_awaitable(value: Awaitable[Any]) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        async def wait() -> Any:
            return await value

        return asyncio.run(wait())
    if inspect.iscoroutine(value):
        value.close()
    raise SummarizerError("the summarize callable is async but prepare() was called inside "
                          "an event loop; await cm.aprepare() instead")


async def asummarize(summarizer: Summarizer, request: SummaryRequest) -> SummaryResult:
    """Await ``summarizer``: natively when it can be awaited, else in a worker thread."""
    if isinstance(summarizer, AsyncSummarizer):
        return await summarizer.asummarize(request)
    return await asyncio.to_thread(summarizer.summarize, request)


def text_repaired(result: SummaryResult) -> SummaryResult:
    """A summary whose text holds a lone surrogate (a model's escaped emoji split in two)
    with it repaired: such text cannot be hashed, stored or sent as UTF-8."""
    if isinstance(result, SummaryResult) and isinstance(result.text, str):
        text = repair_surrogates(result.text)
        if text is not result.text:
            return attrs.evolve(result, text=text)
    return result


def refuse_loopback_summaries(config: Config, registry: Registry) -> None:
    """Fail when checkpoint summaries would silently come from a loopback provider (one that
    declares ``loopback``, like the emulator): a summarizer that calls ``[provider]``, and no
    model the host chose."""
    if (registry.get(SUMMARIZER, config.summarizer.name).calls_provider
            and registry.provider_defaults(config).loopback):
        raise ConfigError(
            f"checkpoint summaries would come from the loopback provider "
            f"{config.provider.name!r} (the default) because nothing names a real model: pass "
            "summarize=<your function> (or provider=...) to open_session, set [provider] name "
            "to a real provider, or set [summarizer] name = \"extractive\" for offline "
            "summaries. To summarize with "
            "the emulator on purpose (demos, tests), pass provider=ctxfold.create_provider()."
        )
