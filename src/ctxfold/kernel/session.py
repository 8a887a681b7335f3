"""Opening a session: select strategies from the registry, load transcript and sidecar.

The kernel never imports a built-in plugin: every strategy comes from the registry by the
name in config (or is passed in explicitly, which tests and embedding hosts may do).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ctxfold.config.schema import Config
from ctxfold.kernel.commit import Committer
from ctxfold.kernel.errors import CtxfoldError, SessionError
from ctxfold.kernel.session_id import validate_session_id
from ctxfold.kernel.sidecar import load_sidecar, save_sidecar
from ctxfold.kernel.strategies import (
    CACHE_TTL_MINUTES,
    UNKNOWN_CACHE_TTL_MINUTES,
    StrategyContext,
    SummaryRequest,
    SummaryResult,
)
from ctxfold.kernel.types import SidecarState, ToolSchema

if TYPE_CHECKING:
    from ctxfold.kernel.engine import ContextManager
    from ctxfold.kernel.registry import Registry

DEFAULT_PRUNER = "head-tail"
SIDECAR_FORMAT = "v3"


def cache_ttl_for(config: Config) -> int:
    """The provider's cache TTL: ``cache_ttl_minutes`` if set, else the SPEC §2 table."""
    if config.provider.cache_ttl_minutes:
        return config.provider.cache_ttl_minutes
    name = config.provider.profile if config.provider.name == "emulator" else config.provider.name
    return CACHE_TTL_MINUTES.get(name, UNKNOWN_CACHE_TTL_MINUTES)


def prompt_cache_key(config: Config, session_id: str, workspace: str | None = None) -> str:
    """``workspace | branch | model`` — no counts, times or hashes (SPEC §3.8)."""
    workspace = workspace if workspace is not None else Path(os.getcwd()).name
    return f"{workspace}|{session_id}|{config.provider.model}"


class LazySummarizer:
    """Builds the configured summarizer on first use, so opening a session never builds a
    provider client that maintenance may not need."""

    def __init__(self, registry: Registry, context: StrategyContext, name: str) -> None:
        self._registry = registry
        self._context = context
        self._name = name
        self._built: Any = None
        registry.get("summarizer", name)  # unknown names fail at open, listing the choices

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        if self._built is None:
            self._built = self._registry.create("summarizer", self._name, self._context)
        result: SummaryResult = self._built.summarize(request)
        return result


def open_manager(
    cls: type[ContextManager],
    session_id: str,
    *,
    config: Config | None,
    registry: Registry | None,
    tools: Sequence[ToolSchema],
    create: bool,
    store_path: str | None,
    options: dict[str, Any],
    **kwargs: Any,
) -> ContextManager:
    """Implementation of :meth:`ContextManager.open`.

    Keyword overrides (for embedding hosts and tests): ``store``, ``estimator``, ``pruner``,
    ``summarizer``, ``provider`` (used by the ``llm`` summarizer), ``window``,
    ``cache_ttl_minutes``, ``clock``, ``workspace``.
    """
    from ctxfold.kernel.registry import Registry, make_plugin_manager

    session_id = validate_session_id(session_id)
    config = config or Config()
    registry = registry or Registry(make_plugin_manager(config.plugins.disabled))
    opts = dict(options)
    if store_path is not None:
        opts["path"] = store_path
    if "provider" in kwargs:
        opts["provider"] = kwargs["provider"]
    context = StrategyContext(config=config, registry=registry, options=opts)
    store = kwargs.get("store") or registry.create("store", config.store.name, context)
    if not store.exists(session_id):
        if not create:
            raise SessionError(f"session {session_id!r} does not exist in the store")
        store.create(session_id)
    canonical = store.load(session_id)
    codec = registry.create("sidecar_format", SIDECAR_FORMAT, context)
    state, notices = load_sidecar(store, codec, session_id, canonical)
    if not state.prompt_cache_key:
        key = prompt_cache_key(config, session_id, kwargs.get("workspace"))
        state = attrs.evolve(state, prompt_cache_key=key)

    def reload() -> SidecarState | None:
        try:
            raw = store.read_sidecar(session_id)
            if raw is None:
                return None
            decoded: SidecarState = codec.decode(json.loads(raw))
        except (CtxfoldError, OSError, ValueError, TypeError, KeyError):
            return None
        return decoded

    committer = Committer(
        state,
        save=lambda st: save_sidecar(store, codec, session_id, st),
        reload=reload,
        registry=registry,
        hooks=registry.pm.hook,
        session_id=session_id,
    )
    summarizer = kwargs.get("summarizer") or LazySummarizer(
        registry, context, config.summarizer.name
    )
    return cls(
        session_id,
        store=store,
        estimator=kwargs.get("estimator")
        or registry.create("estimator", config.estimator.name, context),
        pruner=kwargs.get("pruner") or registry.create("pruner", DEFAULT_PRUNER, context),
        summarizer=summarizer,
        committer=committer,
        canonical=list(canonical),
        config=config,
        tools=tools,
        window=kwargs.get("window"),
        cache_ttl_minutes=kwargs.get("cache_ttl_minutes") or _provider_ttl(config, kwargs),
        clock=kwargs.get("clock") or time.time,
        notices=notices,
    )


def _provider_ttl(config: Config, kwargs: dict[str, Any]) -> int:
    """Config wins; else the provider object's own TTL when one was passed (a third-party
    provider knows its cache); else the SPEC §2 table."""
    provider = kwargs.get("provider")
    own = getattr(provider, "cache_ttl_minutes", 0) if provider is not None else 0
    if not config.provider.cache_ttl_minutes and isinstance(own, int) and own > 0:
        return own
    return cache_ttl_for(config)
