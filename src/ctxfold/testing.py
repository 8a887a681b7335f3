"""pytest fixtures for ctxfold plugin authors (and ctxfold's own tests).

Enable them in a ``conftest.py``::

    pytest_plugins = ["ctxfold.testing"]

Fixtures:

* ``ctxfold_plugin_manager`` — a fresh plugin manager with the built-ins and every installed
  third-party plugin (so your plugin, installed in the test environment, is there).
* ``ctxfold_registry`` — the strategy registry built from it.
* ``ctxfold_config`` — a :class:`~ctxfold.kernel.config.Config` whose store lives in the
  test's ``tmp_path`` (offline: ``extractive`` summarizer, ``heuristic`` estimator).
* ``ctxfold_emulator`` — a factory: ``ctxfold_emulator(profile="deepseek", **kwargs)`` starts a
  loopback :class:`~ctxfold.emulator.Emulator` on 127.0.0.1 and stops it after the test.
* ``ctxfold_provider_config`` — a factory: ``ctxfold_provider_config(emulator, name=None)``
  returns a Config whose ``[provider]`` points a real provider plugin at the emulator.

Nothing here touches the network beyond 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from ctxfold.kernel.config import (
    Config,
    EstimatorConfig,
    ProviderConfig,
    StoreConfig,
    SummarizerConfig,
)
from ctxfold.kernel.plugin_manager import make_plugin_manager
from ctxfold.kernel.registry import Registry

#: The environment variable the emulator-backed provider configs read their key from.
EMULATOR_KEY_ENV = "CTXFOLD_EMULATOR_KEY"


@pytest.fixture
def ctxfold_plugin_manager() -> Any:
    """A fresh plugin manager per test (built-ins + installed third-party plugins)."""
    return make_plugin_manager()


@pytest.fixture
def ctxfold_registry(ctxfold_plugin_manager: Any) -> Registry:
    """The strategy registry of ``ctxfold_plugin_manager``."""
    return Registry(ctxfold_plugin_manager)


@pytest.fixture
def ctxfold_config(tmp_path: Path) -> Config:
    """An offline config with its session store under ``tmp_path``."""
    return Config(
        estimator=EstimatorConfig(name="heuristic"),
        summarizer=SummarizerConfig(name="extractive"),
        store=StoreConfig(path=str(tmp_path / "sessions")),
    )


@pytest.fixture
def ctxfold_emulator() -> Iterator[Callable[..., Any]]:
    """Factory fixture starting loopback emulators; all are stopped after the test."""
    from ctxfold.emulator import Emulator

    started: list[Any] = []

    def start(profile: str = "deepseek", **kwargs: Any) -> Any:
        emulator = Emulator(profile, **kwargs)
        emulator.start()
        started.append(emulator)
        return emulator

    yield start
    for emulator in started:
        emulator.stop()


@pytest.fixture
def ctxfold_provider_config(
    ctxfold_config: Config, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Config]:
    """Factory: a Config whose real provider plugin talks to a running emulator."""

    def make(emulator: Any, name: str | None = None, **provider: Any) -> Config:
        monkeypatch.setenv(EMULATOR_KEY_ENV, "emulator-test-key")
        fields = {
            "name": name or emulator.profile.name,
            "base_url": emulator.base_url,
            "api_key_env": EMULATOR_KEY_ENV,
            "context_window": emulator.profile.window,
            **provider,
        }
        return attrs.evolve(ctxfold_config, provider=ProviderConfig(**fields))

    return make
