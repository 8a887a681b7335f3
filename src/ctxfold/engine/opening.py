"""Opening a session: the one entry point, :func:`open_session`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ctxfold.engine.manager import ContextManager
from ctxfold.engine.parts import build_parts, load_session
from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import Estimator, Provider, Pruner, Store, Summarizer
from ctxfold.kernel.registry import Registry
from ctxfold.kernel.types import ToolSchema


def open_session(
    session_id: str,
    *,
    config: Config | None = None,
    tools: Sequence[ToolSchema] = (),
    create: bool = True,
    registry: Registry | None = None,
    store_path: str | None = None,
    store: Store | None = None,
    estimator: Estimator | None = None,
    pruner: Pruner | None = None,
    summarizer: Summarizer | None = None,
    provider: Provider | None = None,
    window: int | None = None,
    cache_ttl_minutes: int | None = None,
    clock: Callable[[], float] | None = None,
    workspace: str | None = None,
) -> ContextManager:
    """Open (or create) session ``session_id`` with the strategies named in ``config``.

    Every strategy comes from the registry by its name in ``config`` unless passed here
    (``store``, ``estimator``, ``pruner``, ``summarizer``). ``provider`` is the provider the
    ``llm`` summarizer talks to (default: the configured one, built on first use). ``window``
    and ``cache_ttl_minutes`` override the provider's declared values; ``clock`` and
    ``workspace`` (the first part of the prompt-cache key) are seams for tests and hosts.
    """
    built = build_parts(
        session_id, config=config or Config(), registry=registry, tools=tools,
        store_path=store_path, store=store, estimator=estimator, pruner=pruner,
        summarizer=summarizer, provider=provider, window=window,
        cache_ttl_minutes=cache_ttl_minutes, clock=clock, workspace=workspace,
    )
    return ContextManager(built, load_session(built, create=create))
