"""The plugin manager: built-ins, installed third parties, ``[plugins] disabled``.

``make_plugin_manager()`` registers the built-ins — the ``DEFAULT_PLUGINS`` of each module of
the entry-point group ``ctxfold.builtins``, so the kernel names none of them — and the
third-party plugins of the entry-point group ``ctxfold``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

import pluggy

from ctxfold.kernel import hookspecs
from ctxfold.kernel.errors import PluginError

ENTRY_POINT_GROUP = "ctxfold"
BUILTINS_GROUP = "ctxfold.builtins"


def _builtin_packages() -> list[Any]:
    from importlib.metadata import entry_points

    found = sorted(entry_points(group=BUILTINS_GROUP), key=lambda ep: ep.name)
    if not found:
        raise PluginError(f"no entry point of group {BUILTINS_GROUP!r}: ctxfold's built-in "
                          "plugins are not installed (pip install ctxfold, or -e . in a checkout)")
    return [ep.load() for ep in found]


def builtin_plugin_modules() -> dict[str, set[str]]:
    """Module names of the built-in plugins (``DEFAULT_PLUGINS`` of each package of the
    entry-point group ``ctxfold.builtins``, in order), each with the names ``[plugins]
    disabled`` may use for it: the module name, or the name relative to its package
    (``estimators.heuristic``)."""
    return {
        module: {module, module.removeprefix(package.__name__ + ".")}
        for package in _builtin_packages() for module in package.DEFAULT_PLUGINS
    }


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
    for module_name, names in builtin_plugin_modules().items():
        if names & blocked:
            pm.set_blocked(module_name)
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
    for names in builtin_plugin_modules().values():
        known |= names
    return [name for name in disabled if name not in known]
