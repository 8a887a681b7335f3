"""Shared fixtures: a session factory with a fresh registry per test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from ctxfold.engine.manager import ContextManager
from ctxfold.engine.opening import open_session as open_ctxfold_session
from ctxfold.kernel.config import (
    AgentConfig,
    Config,
    EstimatorConfig,
    ProviderConfig,
    StoreConfig,
    SummarizerConfig,
)
from ctxfold.kernel.types import SummaryRequest, SummaryResult

pytest_plugins = ["ctxfold.testing"]

REPO_ROOT = Path(__file__).resolve().parents[1]
TRANSCRIPTS = REPO_ROOT.parent / "shared" / "data" / "transcripts"


class RecordingSummarizer:
    """A summarizer that records each request and answers from a script or a default."""

    def __init__(self, results: list[SummaryResult | Exception] | None = None) -> None:
        self.requests: list[SummaryRequest] = []
        self.results = list(results or [])
        self.before: Callable[[SummaryRequest], None] | None = None

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        if self.before is not None:
            self.before(request)
        if self.results:
            result = self.results.pop(0)
            if isinstance(result, Exception):
                raise result
            return result
        return SummaryResult(text=f"## Goal\n- summary #{len(self.requests)}")


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


@pytest.fixture
def open_session(tmp_path: Path) -> Callable[..., Any]:
    """``open_session(session_id="s", window=..., ratio=..., **open_kwargs)``."""

    def _open(session_id: str = "s", *, window: int = 30_000, ratio: float = 0.5,
              config: Config | None = None, **kwargs: Any) -> ContextManager:
        cfg = config or make_config(tmp_path, window=window, ratio=ratio)
        return open_ctxfold_session(session_id, config=cfg, **kwargs)

    return _open


def evolve(obj: Any, **changes: Any) -> Any:
    return attrs.evolve(obj, **changes)
