"""The strategy registry.

:class:`Registry` gathers, from the plugin manager of :mod:`ctxfold.kernel.plugin_manager`, every
strategy descriptor of every kind in :data:`~ctxfold.kernel.kinds.KINDS`, records its source,
refuses duplicates, selects strategies by the name in config (an empty name: the kind's
declared default) and checks that what a factory returns satisfies its kind's protocol.
``Registry.from_config(config)`` is the one way to build it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar, overload

import attrs
import pluggy

from ctxfold.kernel.config import Config
from ctxfold.kernel.errors import PluginError
from ctxfold.kernel.kinds import (
    ESTIMATOR,
    KIND_BY_NAME,
    KINDS,
    PROVIDER,
    ProviderDefaults,
    StrategyContext,
    StrategyKind,
    StrategySpec,
)
from ctxfold.kernel.plugin_manager import make_plugin_manager

P = TypeVar("P")

def _source_of(pm: pluggy.PluginManager, plugin_name: str, plugin: object) -> str:
    for registered, dist in pm.list_plugin_distinfo():
        if registered is plugin:
            return f"{dist.project_name} {dist.version} (entry point {plugin_name})"
    if plugin_name.startswith("ctxfold."):
        return f"builtin:{plugin_name}"
    return plugin_name


def _sources_by_name(pm: pluggy.PluginManager, hook: str) -> dict[str, list[str]]:
    """For each name the registration hook ``hook`` yields, the sources of the plugins that
    yield it, in pluggy's call order. Each plugin's implementation is called through a subset
    of ``pm.hook`` (so its own wrappers apply); a spec a wrapper adds around other plugins'
    results is attributed to nobody here."""
    impls = list(reversed(getattr(pm.hook, hook).get_hookimpls()))
    plugins: list[tuple[str, object]] = []
    for impl in impls:
        if all(plugin is not impl.plugin for _, plugin in plugins):
            plugins.append((impl.plugin_name, impl.plugin))
    found: dict[str, list[str]] = {}
    for plugin_name, plugin in plugins:
        others = [other for _, other in plugins if other is not plugin]
        alone = pm.subset_hook_caller(hook, remove_plugins=others)
        source = _source_of(pm, plugin_name, plugin)
        for specs in alone():
            for spec in specs or ():
                name = getattr(spec, "name", None)
                if isinstance(name, str):
                    found.setdefault(name, []).append(source)
    return found


class Registry:
    """Every registered strategy, by kind and name."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self._specs: dict[str, dict[str, StrategySpec]] = {}
        self._defaults: dict[str, str] = {}
        for kind in KINDS:
            table: dict[str, StrategySpec] = {}
            caller = getattr(pm.hook, kind.hook)
            sources = _sources_by_name(pm, kind.hook)
            # pm.hook owns the order (last registered first, tryfirst/trylast) and wrappers.
            for specs in caller():
                for spec in specs or ():
                    name = getattr(spec, "name", None)
                    claimants = sources.get(name, []) if isinstance(name, str) else []
                    source = claimants.pop(0) if claimants else f"a wrapper of {kind.hook}"
                    self._add(table, kind.name, spec, source)
            self._specs[kind.name] = table
            declared = sorted(name for name, spec in table.items() if spec.default)
            if len(declared) > 1:
                raise PluginError(
                    f"{kind.name}s {', '.join(repr(n) for n in declared)} all declare "
                    f"themselves the default {kind.name} (sources: "
                    f"{', '.join(table[n].source for n in declared)}); disable one"
                )
            if declared:
                self._defaults[kind.name] = declared[0]

    @classmethod
    def from_config(
        cls,
        config: Config | None = None,
        *,
        load_entry_points: bool = True,
        extra_plugins: Iterable[Any] = (),
    ) -> Registry:
        """The registry for ``config``: built-ins and installed third parties, minus
        ``[plugins] disabled``. ``extra_plugins`` registers plugin objects directly (tests,
        embedding hosts)."""
        disabled = config.plugins.disabled if config is not None else ()
        return cls(make_plugin_manager(disabled, load_entry_points=load_entry_points,
                                       extra_plugins=extra_plugins))

    @staticmethod
    def _add(table: dict[str, StrategySpec], kind: str, spec: StrategySpec, source: str) -> None:
        if not isinstance(spec, StrategySpec):
            raise PluginError(
                f"plugin {source} returned {spec!r} from a {kind} registration hook; "
                "expected ctxfold.StrategySpec"
            )
        if spec.kind and spec.kind != kind:
            raise PluginError(
                f"plugin {source} registered {spec.kind} {spec.name!r} from the {kind} hook"
            )
        if spec.name in table:
            raise PluginError(
                f"duplicate {kind} name {spec.name!r}: registered by {table[spec.name].source} "
                f"and by {source}; disable one with [plugins] disabled = [...]"
            )
        table[spec.name] = attrs.evolve(spec, kind=kind, source=source)

    def names(self, kind: StrategyKind[Any] | str) -> list[str]:
        """Registered names of one kind, sorted."""
        return sorted(self._specs.get(_kind_name(kind), {}))

    def available(self, kind: StrategyKind[Any] | str) -> list[str]:
        """Registered names of one kind whose required modules are installed, sorted."""
        return [n for n in self.names(kind) if not self.get(kind, n).missing()]

    def unavailable(self, kind: StrategyKind[Any] | str) -> dict[str, str]:
        """Registered names of one kind that cannot be built here, with the reason."""
        reasons = {n: self.get(kind, n).missing() for n in self.names(kind)}
        return {n: why for n, why in reasons.items() if why}

    def specs(self, kind: StrategyKind[Any] | str | None = None) -> list[StrategySpec]:
        """All descriptors (of one kind), in kind order then sorted by name."""
        kinds = [_kind_name(kind)] if kind else list(self._specs)
        return [self._specs[k][n] for k in kinds for n in sorted(self._specs.get(k, {}))]

    def in_call_order(self, kind: StrategyKind[Any] | str) -> list[str]:
        """Registered names of one kind in the order pluggy's hook call returned them: the
        plugin registered last first (``tryfirst``/``trylast`` move one), each plugin's list
        in its own order, as wrappers left it."""
        return list(self._specs.get(_kind_name(kind), {}))

    def default_name(self, kind: StrategyKind[Any] | str) -> str:
        """The name of the strategy of ``kind`` that declares itself the default (what an
        empty name in config selects)."""
        kind_name = _kind_name(kind)
        try:
            return self._defaults[kind_name]
        except KeyError:
            raise PluginError(
                f"no registered {kind_name} declares itself the default; name one in config "
                f"(available: {', '.join(self.names(kind_name)) or '(none registered)'})"
            ) from None

    def get(self, kind: StrategyKind[Any] | str, name: str) -> StrategySpec:
        """The descriptor ``name`` of ``kind`` (empty: the kind's default); unknown names
        list the available ones."""
        kind_name = _kind_name(kind)
        name = name or self.default_name(kind_name)
        try:
            return self._specs[kind_name][name]
        except KeyError:
            available = ", ".join(self.names(kind_name)) or "(none registered)"
            raise PluginError(f"unknown {kind_name} {name!r}; available: {available}") from None

    @overload
    def create(
        self, kind: StrategyKind[P], name: str, *, config: Config, options: object | None = None
    ) -> P: ...

    @overload
    def create(
        self, kind: str, name: str, *, config: Config, options: object | None = None
    ) -> Any: ...

    def create(
        self, kind: StrategyKind[Any] | str, name: str, *, config: Config,
        options: object | None = None,
    ) -> Any:
        """Build strategy ``name`` of ``kind`` (a kind of :data:`KINDS` or its name, e.g.
        ``"provider"``) with ``options`` (default: the kind's empty options). Fails with
        :class:`PluginError` when the options are of the wrong type or the factory returns
        something that does not satisfy the kind's protocol."""
        if isinstance(kind, str):
            _kind_name(kind)
            kind = KIND_BY_NAME[kind]
        spec = self.get(kind, name)
        missing = spec.missing()
        if missing:
            raise PluginError(missing)
        if options is None:
            options = kind.options()
        elif not isinstance(options, kind.options):
            raise PluginError(
                f"{kind.name} {name!r}: options must be {kind.options.__name__}, got "
                f"{type(options).__name__}"
            )
        built = spec.factory(StrategyContext(config=config, registry=self, options=options))
        if not isinstance(built, kind.protocol):
            raise PluginError(
                f"{kind.name} {name!r} from {spec.source} returned {type(built).__name__}, "
                f"which does not satisfy {kind.protocol.__name__}; fix the plugin's factory"
            )
        return built

    def provider_defaults(self, config: Config, name: str | None = None) -> ProviderDefaults:
        """What provider ``name`` (default ``[provider] name``) declares for the settings
        ``[provider]`` leaves unset; a provider that declares nothing gets the generic
        :class:`ProviderDefaults` of an unknown model."""
        spec = self.get(PROVIDER, name or config.provider.name)
        declared = spec.defaults
        if declared is None:
            return UNKNOWN_PROVIDER
        if isinstance(declared, ProviderDefaults):
            return declared
        resolved = declared(config)
        if not isinstance(resolved, ProviderDefaults):
            raise PluginError(
                f"provider {spec.name!r} from {spec.source}: its defaults function returned "
                f"{type(resolved).__name__}, not ProviderDefaults"
            )
        return resolved

    def resolve(self, config: Config, sources: dict[str, str] | None = None) -> Config:
        """``config`` with every strategy name it leaves empty set to its kind's default and
        every ``[provider]`` value it leaves unset (empty or 0) filled in from what the selected
        provider declares; explicit values win. ``sources`` (when given) records where each
        filled value came from (``plugin default (…)``, ``provider default (<name>)``)."""
        found: dict[str, str] = {}  # recorded only once everything resolved
        named = strategy_fill(config, self, found)  # the estimator the provider declares:
        declared = "" if config.estimator.name else self.provider_defaults(named).estimator
        if declared in self.names(ESTIMATOR):
            found["estimator.name"] = f"provider default ({named.provider.name})"
            named = attrs.evolve(named, estimator=attrs.evolve(named.estimator, name=declared))
        config = named
        filled = provider_fill(config, self.provider_defaults(config))
        if sources is not None:
            sources.update(found)
            sources.update({f"provider.{key}": f"provider default ({config.provider.name})"
                            for key in filled})
        if not filled:
            return config
        return attrs.evolve(config, provider=attrs.evolve(config.provider, **filled))


#: Config keys that name a strategy, and the strategy's kind.
STRATEGY_KEYS = {
    "provider.name": "provider", "estimator.name": "estimator", "pruner.name": "pruner",
    "summarizer.name": "summarizer", "store.name": "store",
    "store.sidecar_format": "sidecar_format",
}


def strategy_fill(config: Config, registry: Registry,
                  sources: dict[str, str] | None = None) -> Config:
    """``config`` with each empty strategy name set to the default its kind's plugins
    declare; ``sources`` (when given) records ``plugin default (<source>)`` for each."""
    sections: dict[str, dict[str, str]] = {}
    for dotted, kind in STRATEGY_KEYS.items():
        section, _, key = dotted.partition(".")
        if getattr(getattr(config, section), key):
            continue
        try:
            name = registry.default_name(kind)
        except PluginError:  # nothing declares one: left empty, named at selection
            continue
        sections.setdefault(section, {})[key] = name
        if sources is not None:
            sources[dotted] = f"plugin default ({registry.get(kind, name).source})"
    return attrs.evolve(config, **{
        section: attrs.evolve(getattr(config, section), **values)
        for section, values in sections.items()
    })


#: ``[provider]`` keys a provider declares a default for, and the ProviderDefaults field.
DECLARED_PROVIDER_KEYS = ("model", "base_url", "api_key_env", "context_window",
                          "cache_ttl_minutes")


def provider_fill(config: Config, defaults: ProviderDefaults) -> dict[str, Any]:
    """The ``[provider]`` values ``config`` leaves unset, from ``defaults``."""
    current = config.provider
    return {
        key: getattr(defaults, key)
        for key in DECLARED_PROVIDER_KEYS
        if not getattr(current, key) and getattr(defaults, key)
    }


#: Defaults of a provider that declares none: no model, a 128K window, the unknown TTL.
UNKNOWN_PROVIDER = ProviderDefaults(model="", context_window=131_072)


def _kind_name(kind: StrategyKind[Any] | str) -> str:
    name = kind if isinstance(kind, str) else kind.name
    if name not in KIND_BY_NAME:
        raise PluginError(f"unknown strategy kind {name!r}; kinds: {', '.join(KIND_BY_NAME)}")
    return name
