"""How strategies are described, built and tabled.

A plugin returns :class:`StrategySpec` descriptors from a registration hook; the registry
builds one with its ``factory``, passing a :class:`StrategyContext` that carries the effective
config, the registry itself and the typed options of the strategy's kind. :data:`KINDS` is the
one table of kinds: for each, its registration hook, the protocol of
:mod:`ctxfold.kernel.contracts` its factories return, and its options class. Options are
frozen ``attrs`` classes, so a misspelt option is an error, never silently ignored.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import attrs

from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import (
    ConfigMigration,
    Estimator,
    Importer,
    Policy,
    Provider,
    Pruner,
    SidecarCodec,
    Store,
    Summarizer,
)
from ctxfold.kernel.types import ToolSchema

OptionsT = TypeVar("OptionsT")
P = TypeVar("P")


#: Tokens a provider spends on output when a request leaves the budget to it, by effort.
OutputBudget = Callable[[str], int]


def _no_budget(_effort: str) -> int:
    return 0


@attrs.frozen(kw_only=True)
class ProviderDefaults:
    """What a provider declares for settings ``[provider]`` leaves unset.

    ``output_budget(effort)`` is the output the provider uses when ``max_output_tokens`` is
    0, within ``max_output(model)`` (the largest output a model accepts; ``None``: no
    per-model limit) — :meth:`auto_budget` applies both; with ``omit_output_field`` the
    request omits the field unless the window leaves less room than that budget (DeepSeek),
    otherwise the budget is always sent (a ladder).
    ``output_field``: the chat field of the output budget. ``estimator``: what an empty
    ``[estimator] name`` selects (when registered).
    ``parse_overflow(status, body)`` recognises a context-overflow error body (``None``: the
    transport's generic parser). ``request_id_headers`` are read, in order, for error
    messages and receipts. ``headers`` are sent with every request. ``key_header`` is the
    header that carries the API key, its value ``key_prefix`` + the key (``Authorization:
    Bearer …`` by default; Anthropic's ``x-api-key`` has no prefix). ``loopback``: answers
    locally without a model (the emulator), so summaries from it are no model's.
    """

    model: str
    context_window: int
    cache_ttl_minutes: int = 24 * 60
    base_url: str = ""
    api_key_env: str = ""
    output_budget: OutputBudget = _no_budget
    max_output: Callable[[str], int] | None = None
    omit_output_field: bool = False
    output_field: str = "max_completion_tokens"
    estimator: str = ""
    parse_overflow: Callable[[int, str], Any] | None = None
    request_id_headers: tuple[str, ...] = ("x-request-id", "request-id")
    headers: Mapping[str, str] = attrs.field(factory=dict)
    key_header: str = "Authorization"
    key_prefix: str = "Bearer "
    loopback: bool = False

    def auto_budget(self, effort: str, model: str = "") -> int:
        """The output used for ``effort`` when none is asked for, within what ``model``
        (default: the declared one) accepts."""
        budget = self.output_budget(effort)
        if self.max_output is None:
            return budget
        return min(budget, self.max_output(model or self.model))


class Strategies(Protocol):
    """What a factory may ask of the registry: build another strategy by kind and name
    (implemented by :class:`ctxfold.kernel.registry.Registry`)."""

    def create(
        self, kind: StrategyKind[P], name: str, *, config: Config, options: object | None = None
    ) -> P:
        """Build strategy ``name`` of ``kind``; unknown names fail listing the choices."""
        ...

    def provider_defaults(self, config: Config, name: str | None = None) -> ProviderDefaults:
        """What provider ``name`` (default ``[provider] name``) declares."""
        ...


@attrs.frozen
class StrategyContext(Generic[OptionsT]):
    """What a factory gets: the effective config, the registry (to build other strategies)
    and the options of its kind."""

    config: Config
    registry: Strategies
    options: OptionsT


@attrs.frozen
class StrategySpec:
    """A named strategy registered by a plugin.

    ``factory(context)`` builds the strategy object, which must satisfy the protocol of its
    kind (see :data:`KINDS`). ``kind`` is filled in by the registry from the hook that
    returned the descriptor (``ctxfold_providers`` → ``provider``); a plugin need not give
    it, and one that does must give the hook's. ``defaults`` (providers only) declares the
    provider's defaults: a :class:`ProviderDefaults`, or a function of the config for a
    provider whose defaults follow another setting. ``source`` is filled in by the registry.
    ``requires`` names the modules the strategy needs beyond ctxfold's own dependencies (an
    optional extra); ``install`` says how to get them. A strategy whose modules are missing
    stays registered (listed, named in errors) but is not *available*. ``default`` marks the
    strategy an empty name in config selects (one per kind: the built-ins declare theirs, the
    kernel names none); ``calls_provider`` marks a summarizer whose summaries are requests to
    ``[provider]``.
    """

    name: str
    factory: Callable[[StrategyContext[Any]], Any]
    description: str = ""
    source: str = ""
    defaults: ProviderDefaults | Callable[[Config], ProviderDefaults] | None = None
    requires: tuple[str, ...] = ()
    install: str = ""
    default: bool = False
    calls_provider: bool = False
    kind: str = ""

    def missing(self) -> str:
        """Why the strategy cannot be built here ("" when its modules are importable)."""
        import importlib.util

        absent = []
        for module in self.requires:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                absent.append(module)
        if not absent:
            return ""
        hint = f"; {self.install}" if self.install else ""
        return f"{self.kind} {self.name!r} needs {', '.join(absent)}, not installed{hint}"


@attrs.frozen
class StrategyKind(Generic[P]):
    """One strategy kind: its name, its registration hook, the protocol its factories
    return and the type of the options they receive (the table is
    :data:`ctxfold.kernel.kinds.KINDS`)."""

    name: str
    hook: str
    protocol: Any
    options: type[Any]


# -- what factories receive ------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class NoOptions:
    """Options of kinds whose factories take none (pruner, sidecar format, config
    migration)."""


@attrs.frozen(kw_only=True)
class EstimatorOptions:
    """``encoding`` names a tokenizer's encoding (empty: the estimator's own default)."""

    encoding: str = ""


@attrs.frozen(kw_only=True)
class StoreOptions:
    """``path`` overrides ``[store] path`` (a CLI flag, a replay's scratch directory)."""

    path: str | None = None


@attrs.frozen(kw_only=True)
class ProviderOptions:
    """Seams and overrides for a provider factory. ``plugin`` carries a provider's own typed
    options (e.g. :class:`ctxfold.emulator.EmulatorOptions`); a provider that gets options of a
    type it does not know raises :class:`~ctxfold.PluginError`."""

    base_url: str = ""
    api_key: str | None = None
    transport: Any = None
    async_transport: Any = None
    sleep: Callable[[float], None] | None = None
    clock: Callable[[], float] | None = None
    on_request: Callable[[Mapping[str, Any]], None] | None = None
    idle_timeout: float | None = None
    total_timeout: float | None = None
    max_retries: int | None = None
    plugin: object | None = None


@attrs.frozen(kw_only=True)
class SummarizerOptions:
    """``provider``: the session's own provider, so an ``llm`` summary shares its client."""

    provider: Provider | None = None


@attrs.frozen(kw_only=True)
class ImporterOptions:
    """``exit_message``: what ``mini-swe-agent-v2`` makes of its final exit message
    (``tool``: a tool result; ``drop``: left out)."""

    exit_message: str = "tool"


@attrs.frozen(kw_only=True)
class PolicyOptions:
    """What every replay policy gets: the session's tools, the window, the trigger ratio, the
    shared estimator and summarizer, a private scratch directory and the session name.
    ``constants`` tune a policy's named constants (tests); an unknown name is an error.

    ``window`` is the input budget every request must fit: the model's window minus
    ``reserve_output`` (``model_window`` is the model's). ``summary_tokens``: the briefing
    length of summary requests asking none (with ``equal_summary_length``: of all)."""

    tools: tuple[ToolSchema, ...]
    window: int
    compact_ratio: float
    estimator: Estimator
    summarizer: Summarizer
    workdir: Path
    session_name: str = "session"
    constants: Mapping[str, float] = attrs.field(factory=dict)
    reserve_output: int = 0
    summary_tokens: int = 0
    equal_summary_length: bool = False

    @property
    def model_window(self) -> int:
        """The model's context window: the input budget plus the output reservation."""
        return self.window + self.reserve_output

    @property
    def trigger(self) -> int:
        """``floor(window × compact_ratio)`` — ctxfold's trigger, also truncate-oldest's."""
        return math.floor(self.window * self.compact_ratio)


ESTIMATOR: StrategyKind[Estimator] = StrategyKind(
    "estimator", "ctxfold_estimators", Estimator, EstimatorOptions)
PRUNER: StrategyKind[Pruner] = StrategyKind("pruner", "ctxfold_pruners", Pruner, NoOptions)
SUMMARIZER: StrategyKind[Summarizer] = StrategyKind(
    "summarizer", "ctxfold_summarizers", Summarizer, SummarizerOptions)
STORE: StrategyKind[Store] = StrategyKind("store", "ctxfold_stores", Store, StoreOptions)
PROVIDER: StrategyKind[Provider] = StrategyKind(
    "provider", "ctxfold_providers", Provider, ProviderOptions)
SIDECAR_FORMAT: StrategyKind[SidecarCodec] = StrategyKind(
    "sidecar_format", "ctxfold_sidecar_formats", SidecarCodec, NoOptions)
CONFIG_MIGRATION: StrategyKind[ConfigMigration] = StrategyKind(
    "config_migration", "ctxfold_config_migrations", ConfigMigration, NoOptions)
IMPORTER: StrategyKind[Importer] = StrategyKind(
    "importer", "ctxfold_importers", Importer, ImporterOptions)
POLICY: StrategyKind[Policy] = StrategyKind("policy", "ctxfold_policies", Policy, PolicyOptions)

#: Every strategy kind, in registration order: the one table the registry walks.
KINDS: tuple[StrategyKind[Any], ...] = (
    ESTIMATOR, PRUNER, SUMMARIZER, STORE, PROVIDER, SIDECAR_FORMAT, CONFIG_MIGRATION,
    IMPORTER, POLICY,
)
KIND_BY_NAME: dict[str, StrategyKind[Any]] = {kind.name: kind for kind in KINDS}
