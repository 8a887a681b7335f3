"""Fixtures for provider tests (helpers live in ``providers_support``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from providers_support import SECRET

from ctxfold.config.schema import Config, ProviderConfig
from ctxfold.kernel.registry import Registry, make_plugin_manager
from ctxfold.kernel.strategies import StrategyContext
from ctxfold.kernel.wire import HttpProvider


@pytest.fixture
def make_provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., HttpProvider]]:
    """``make_provider(name, handler, **options)`` built through the real registry."""
    for var in ("DEEPSEEK_API_KEY", "MIMO_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.setenv(var, SECRET)
    made: list[HttpProvider] = []

    def _make(name: str, handler: Callable[[httpx.Request], httpx.Response],
              provider: ProviderConfig | None = None, **options: Any) -> HttpProvider:
        config = Config(provider=provider or ProviderConfig(name=name, model="m-1"))
        registry = Registry(make_plugin_manager(load_entry_points=False))
        options.setdefault("sleep", lambda _s: None)
        context = StrategyContext(config=config, registry=registry,
                                  options={"transport": httpx.MockTransport(handler), **options})
        result: HttpProvider = registry.create("provider", name, context)
        made.append(result)
        return result

    yield _make
    for p in made:
        p.close()
