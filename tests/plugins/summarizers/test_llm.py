"""The llm summarizer: exactly one provider call, effort none, the output cap (design §4.4)."""

from __future__ import annotations

from typing import Any

import pytest

from ctxfold import (
    ChatRequest,
    ChatResponse,
    Config,
    ContextLimitError,
    Message,
    PluginError,
    Registry,
    StrategySpec,
    Summarizer,
    SummarizerOptions,
    ToolSchema,
    Usage,
    hookimpl,
)
from ctxfold.kernel.config import ProviderConfig, SummarizerConfig
from ctxfold.kernel.kinds import SUMMARIZER
from ctxfold.kernel.summary import build_summary_request


class FakeProvider:
    name = "fake"
    context_window = 40_000
    cache_ttl_minutes = 60
    def __init__(self, response: ChatResponse | None = None, error: Exception | None = None):
        self.requests: list[ChatRequest] = []
        self.response = response or ChatResponse(
            message=Message(role="assistant", content="## Goal\n- ship it"),
            finish_reason="stop",
            usage=Usage(prompt_tokens=900, completion_tokens=12, cache_hit_tokens=880),
        )
        self.error = error

    def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        return self.response


REQUEST = build_summary_request(
    Message(role="system", content="sys"),
    [Message(role="user", content="do the thing"), Message(role="assistant", content="ok")],
    [ToolSchema(name="shell")],
    window=40_000,
)


def _summarizer(provider: Any, config: Config | None = None) -> Any:
    registry = Registry.from_config(load_entry_points=False)
    return registry.create(SUMMARIZER, "llm", config=config or Config(),
                           options=SummarizerOptions(provider=provider))


def test_one_call_with_effort_none_cap_and_same_messages_and_tools() -> None:
    provider = FakeProvider()
    summarizer = _summarizer(provider)
    assert isinstance(summarizer, Summarizer)
    result = summarizer.summarize(REQUEST)
    assert len(provider.requests) == 1
    sent = provider.requests[0]
    assert sent.effort == "none"
    assert sent.max_output_tokens == 8192 == REQUEST.max_tokens
    assert sent.messages == REQUEST.messages
    assert sent.tools == REQUEST.tools
    assert sent.stream is True
    assert sent.model == Config().provider.model
    assert result.text == "## Goal\n- ship it"
    assert result.finish_reason == "stop"
    assert result.usage == provider.response.usage


def test_summarizer_model_overrides_provider_model() -> None:
    provider = FakeProvider()
    config = Config(
        provider=ProviderConfig(model="big"), summarizer=SummarizerConfig(model="cheap")
    )
    _summarizer(provider, config).summarize(REQUEST)
    assert provider.requests[0].model == "cheap"


def test_length_and_empty_are_returned_once_without_retry() -> None:
    provider = FakeProvider(
        ChatResponse(message=Message(role="assistant", content="## Go"), finish_reason="length")
    )
    result = _summarizer(provider).summarize(REQUEST)
    assert (result.text, result.finish_reason) == ("## Go", "length")
    assert len(provider.requests) == 1


def test_provider_errors_propagate_after_one_call() -> None:
    provider = FakeProvider(error=ContextLimitError("too long", window=1000))
    summarizer = _summarizer(provider)
    with pytest.raises(ContextLimitError, match="too long"):
        summarizer.summarize(REQUEST)
    assert len(provider.requests) == 1


def test_factory_builds_configured_provider_when_none_is_passed() -> None:
    provider = FakeProvider()

    class Plugin:
        @hookimpl
        def ctxfold_providers(self) -> list[StrategySpec]:
            return [StrategySpec(name="fake-test", factory=lambda _c: provider)]

    registry = Registry.from_config(load_entry_points=False, extra_plugins=[Plugin()])
    config = Config(provider=ProviderConfig(name="fake-test"))
    summarizer = registry.create(SUMMARIZER, "llm", config=config)
    summarizer.summarize(REQUEST)
    assert len(provider.requests) == 1


def test_unknown_provider_name_fails_with_choices() -> None:
    registry = Registry.from_config(load_entry_points=False)
    config = Config(provider=ProviderConfig(name="no-such-provider"))
    with pytest.raises(PluginError, match="unknown provider 'no-such-provider'"):
        registry.create(SUMMARIZER, "llm", config=config)
