"""Opening a session: the one entry point, :func:`open_session`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxfold.config.load import LoadedConfig, load_config
from ctxfold.engine.manager import ContextManager
from ctxfold.engine.parts import build_parts, load_session
from ctxfold.engine.summarizing import SummarizeFn
from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import Estimator, Provider, Pruner, Store, Summarizer
from ctxfold.kernel.kinds import PROVIDER, ProviderOptions
from ctxfold.kernel.registry import Registry
from ctxfold.kernel.types import ToolSchema


def open_session(
    session_id: str,
    *,
    config: Config | LoadedConfig | None = None,
    tools: Sequence[ToolSchema | Mapping[str, Any]] = (),
    create: bool = True,
    registry: Registry | None = None,
    store_path: str | None = None,
    store: Store | None = None,
    estimator: Estimator | None = None,
    pruner: Pruner | None = None,
    summarizer: Summarizer | None = None,
    summarize: SummarizeFn | None = None,
    provider: Provider | None = None,
    window: int | None = None,
    cache_ttl_minutes: int | None = None,
    clock: Callable[[], float] | None = None,
    workspace: str | None = None,
    offer_capability: bool = True,
) -> ContextManager:
    """Open (or create) session ``session_id`` with the strategies named in ``config``.

    ``config`` is a :class:`~ctxfold.Config` or what :func:`ctxfold.load_config` returned.
    Without it, the configuration is loaded exactly as the ``ctxfold`` command loads it —
    the user file, ``./ctxfold.toml``, ``CTXFOLD_*`` variables (``docs/configuration.md``) —
    so a session a host opens uses the trigger, store, estimator and provider the TOML
    selects and is listed by ``ctxfold sessions list``; its notices land in
    :attr:`ContextManager.notices`. ``config=ctxfold.Config()`` gives the pure defaults and
    reads no file and no variable.

    Every strategy comes from the registry by its name in ``config`` unless passed here
    (``store``, ``estimator``, ``pruner``, ``summarizer``). ``summarize`` is the host's own
    summary function (sync or async; it gets the :class:`~ctxfold.SummaryRequest` and
    returns the briefing text). ``provider`` is the provider the ``llm`` summarizer talks to
    (default: the configured one, built on first use — never the loopback emulator unless
    passed here). ``tools`` may be :class:`~ctxfold.ToolSchema` objects or OpenAI tool
    dicts. ``window`` and ``cache_ttl_minutes`` override the provider's declared values;
    ``clock`` and ``workspace`` (the first part of the prompt-cache key) are seams for tests
    and hosts. ``offer_capability=False`` keeps ``use_capability`` out of every request, for a
    host that answers no tool calls (see :attr:`PreparedRequest.offers_capability`).
    """
    notices: tuple[str, ...] = ()
    if config is None:
        config = load_config(registry=registry)
    if isinstance(config, LoadedConfig):
        notices = config.notices
        config = config.config
    built = build_parts(
        session_id, config=config, registry=registry, tools=tools,
        store_path=store_path, store=store, estimator=estimator, pruner=pruner,
        summarizer=summarizer, summarize=summarize, provider=provider, window=window,
        cache_ttl_minutes=cache_ttl_minutes, clock=clock, workspace=workspace,
        offer_capability=offer_capability,
    )
    cm = ContextManager(built, load_session(built, create=create))
    cm.notices[:0] = notices
    return cm


def create_provider(
    config: Config | LoadedConfig | None = None,
    *,
    registry: Registry | None = None,
    options: ProviderOptions | None = None,
) -> Provider:
    """The provider ``[provider] name`` selects (default: the loopback emulator), ready for
    ``cm.complete(provider)``; close it with ``provider.close()`` or a ``with`` block.
    Without ``config`` the configuration is loaded as :func:`open_session` loads it."""
    if config is None:
        config = load_config(registry=registry)
    if isinstance(config, LoadedConfig):
        config = config.config
    registry = registry or Registry.from_config(config)
    return registry.create(PROVIDER, config.provider.name,
                           config=registry.resolve(config), options=options)
