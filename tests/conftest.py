"""Shared fixtures: a session factory with a fresh registry per test."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from ctxfold import Config, ContextManager
from ctxfold import open_session as open_ctxfold_session
from ctxfold.kernel.config import (
    AgentConfig,
    EstimatorConfig,
    ProviderConfig,
    StoreConfig,
    SummarizerConfig,
)

pytest_plugins = ["ctxfold.testing", "tests.postgres"]

# open_session() and create_provider() without config= read the user file as the CLI does:
# point it at an empty directory so a developer's own ~/.config/ctxfold never leaks in (tests
# that need a user file set CTXFOLD_CONFIG_HOME themselves).
os.environ["CTXFOLD_CONFIG_HOME"] = tempfile.mkdtemp(prefix="ctxfold-test-home-")

REPO_ROOT = Path(__file__).resolve().parents[1]
TRANSCRIPTS = REPO_ROOT.parent / "shared" / "data" / "transcripts"


def make_config(
    tmp_path: Path, *, window: int = 30_000, ratio: float = 0.5, **agent: Any
) -> Config:
    return Config(
        agent=AgentConfig(compact_ratio=ratio, **agent),
        provider=ProviderConfig(context_window=window),
        estimator=EstimatorConfig(name="heuristic"),
        summarizer=SummarizerConfig(name="extractive"),
        store=StoreConfig(path=str(tmp_path / "sessions")),
    )


class AsyncFace:
    """A ContextManager driven through its async face: ``prepare``/``compact``/``complete``
    run ``aprepare``/``acompact``/``acomplete`` in an event loop, everything else is the
    manager itself. The engine's tests run on both faces through it."""

    def __init__(self, cm: ContextManager) -> None:
        self._cm = cm

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cm, name)

    def prepare(self, *args: Any, **kwargs: Any) -> Any:
        return asyncio.run(self._cm.aprepare(*args, **kwargs))

    def compact(self, *args: Any, **kwargs: Any) -> Any:
        return asyncio.run(self._cm.acompact(*args, **kwargs))

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        return asyncio.run(self._cm.acomplete(*args, **kwargs))

    def fork(self, *args: Any, **kwargs: Any) -> Any:
        return AsyncFace(self._cm.fork(*args, **kwargs))


@pytest.fixture(params=["sync", "async"])
def open_session(tmp_path: Path, request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``open_session(session_id="s", window=..., ratio=..., **open_kwargs)``, once for the
    sync face and once for the async one."""

    def _open(session_id: str = "s", *, window: int = 30_000, ratio: float = 0.5,
              config: Config | None = None, **kwargs: Any) -> Any:
        cfg = config or make_config(tmp_path, window=window, ratio=ratio)
        cm = open_ctxfold_session(session_id, config=cfg, **kwargs)
        return AsyncFace(cm) if request.param == "async" else cm

    return _open


def evolve(obj: Any, **changes: Any) -> Any:
    return attrs.evolve(obj, **changes)
