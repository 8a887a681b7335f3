"""Plugin manager factory and the strategy registry.

``make_plugin_manager()`` registers the built-ins listed in ``ctxfold.plugins.DEFAULT_PLUGINS``
(by module name, so the kernel never imports a built-in itself) and the third-party plugins of
the entry-point group ``ctxfold``. ``Registry`` gathers every strategy descriptor, records its
source, refuses duplicates and selects strategies by the name in config.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

import pluggy

from ctxfold.kernel import hookspecs
from ctxfold.kernel.errors import PluginError
from ctxfold.kernel.strategies import Kind, StrategyContext, StrategySpec

ENTRY_POINT_GROUP = "ctxfold"
BUILTIN_PLUGINS_MODULE = "ctxfold.plugins"


def builtin_plugin_modules() -> list[str]:
    """Module names of the built-in plugins (``ctxfold.plugins.DEFAULT_PLUGINS``)."""
    module = importlib.import_module(BUILTIN_PLUGINS_MODULE)
    return list(module.DEFAULT_PLUGINS)


def make_plugin_manager(
    disabled: Iterable[str] = (),
    *,
    load_entry_points: bool = True,
    extra_plugins: Iterable[Any] = (),
) -> pluggy.PluginManager:
    """Build a fresh plugin manager with the built-ins and the installed third parties.

    ``disabled`` names plugins to block: a built-in by its module name
    (``ctxfold.plugins.estimators.heuristic``) or short name (``estimators.heuristic``), a
    third party by its entry-point name. ``extra_plugins`` registers objects directly (tests).
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    blocked = set(disabled)
    for name in blocked:
        pm.set_blocked(name)
        pm.set_blocked(f"{BUILTIN_PLUGINS_MODULE}.{name}")
    for module_name in builtin_plugin_modules():
        if pm.is_blocked(module_name):
            continue
        pm.register(importlib.import_module(module_name), name=module_name)
    if load_entry_points:
        try:
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        except Exception as exc:  # a broken third-party plugin must say which one
            raise PluginError(
                f"loading plugins of entry-point group {ENTRY_POINT_GROUP!r} failed: {exc}; "
                "disable the broken plugin with [plugins] disabled = [\"<name>\"]"
            ) from exc
    for plugin in extra_plugins:
        pm.register(plugin)
    return pm


def unknown_disabled(disabled: Iterable[str]) -> list[str]:
    """Entries of ``[plugins] disabled`` that name no built-in module and no installed
    entry point (a typo, or a plugin that is not installed here)."""
    from importlib.metadata import entry_points

    known = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    for module in builtin_plugin_modules():
        known.add(module)
        known.add(module.removeprefix(BUILTIN_PLUGINS_MODULE + "."))
    return [name for name in disabled if name not in known]


def _source_of(pm: pluggy.PluginManager, plugin_name: str, plugin: object) -> str:
    for registered, dist in pm.list_plugin_distinfo():
        if registered is plugin:
            return f"{dist.project_name} {dist.version} (entry point {plugin_name})"
    if plugin_name.startswith(BUILTIN_PLUGINS_MODULE + "."):
        return f"builtin:{plugin_name}"
    return plugin_name


class Registry:
    """Every registered strategy, by kind and name."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self._specs: dict[Kind, dict[str, StrategySpec]] = {}
        for kind, hook_name in hookspecs.REGISTRATION_HOOKS.items():
            table: dict[str, StrategySpec] = {}
            caller = getattr(pm.hook, hook_name)
            for impl in caller.get_hookimpls():
                source = _source_of(pm, impl.plugin_name, impl.plugin)
                for spec in impl.function() or ():
                    self._add(table, kind, spec, source)
            self._specs[kind] = table  # type: ignore[index]

    @staticmethod
    def _add(table: dict[str, StrategySpec], kind: str, spec: StrategySpec, source: str) -> None:
        if not isinstance(spec, StrategySpec):
            raise PluginError(
                f"plugin {source} returned {spec!r} from a {kind} registration hook; "
                "expected ctxfold.kernel.strategies.StrategySpec"
            )
        if spec.kind != kind:
            raise PluginError(
                f"plugin {source} registered {spec.kind} {spec.name!r} from the {kind} hook"
            )
        if spec.name in table:
            raise PluginError(
                f"duplicate {kind} name {spec.name!r}: registered by {table[spec.name].source} "
                f"and by {source}; disable one with [plugins] disabled = [...]"
            )
        table[spec.name] = StrategySpec(
            kind=spec.kind,
            name=spec.name,
            factory=spec.factory,
            description=spec.description,
            source=source,
        )

    def names(self, kind: Kind) -> list[str]:
        """Registered names of one kind, sorted."""
        return sorted(self._specs.get(kind, {}))

    def specs(self, kind: Kind | None = None) -> list[StrategySpec]:
        """All descriptors (of one kind), sorted by kind then name."""
        kinds = [kind] if kind else list(self._specs)
        return [self._specs[k][n] for k in kinds for n in sorted(self._specs.get(k, {}))]

    def get(self, kind: Kind, name: str) -> StrategySpec:
        """The descriptor ``name`` of ``kind``; unknown names list the available ones."""
        try:
            return self._specs[kind][name]
        except KeyError:
            available = ", ".join(self.names(kind)) or "(none registered)"
            raise PluginError(
                f"unknown {kind} {name!r}; available: {available}"
            ) from None

    def create(self, kind: Kind, name: str, context: StrategyContext) -> Any:
        """Build the strategy ``name`` of ``kind`` with its factory."""
        return self.get(kind, name).factory(context)
