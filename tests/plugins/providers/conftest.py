"""Fixtures for provider tests (helpers live in ``providers_support``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from providers_support import SECRET

from ctxfold import Config, HttpProvider, ProviderOptions, Registry
from ctxfold.kernel.config import ProviderConfig
from ctxfold.kernel.kinds import PROVIDER


@pytest.fixture
def make_provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., HttpProvider]]:
    """``make_provider(name, handler, **options)`` built through the real registry."""
    for var in ("DEEPSEEK_API_KEY", "MIMO_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(var, SECRET)
    made: list[HttpProvider] = []

    def _make(name: str, handler: Callable[[httpx.Request], httpx.Response],
              provider: ProviderConfig | None = None, **options: Any) -> HttpProvider:
        config = Config(provider=provider or ProviderConfig(name=name, model="m-1"))
        registry = Registry.from_config(load_entry_points=False)
        options.setdefault("sleep", lambda _s: None)
        result = registry.create(
            PROVIDER, name, config=config,
            options=ProviderOptions(transport=httpx.MockTransport(handler), **options))
        assert isinstance(result, HttpProvider)
        made.append(result)
        return result

    yield _make
    for p in made:
        p.close()
