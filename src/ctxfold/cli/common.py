"""Helpers shared by the CLI commands: effective config and registry for parsed arguments.

Commands that let a flag override a config key declare it with :func:`add_config_flag`;
:func:`load_cli_config` then applies it as the highest-precedence layer, and
``ctxfold config show`` reports it as ``flag --the-flag``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from ctxfold.kernel.errors import ConfigError

if TYPE_CHECKING:
    from ctxfold.config.load import LoadedConfig
    from ctxfold.kernel.registry import Registry

_FLAG_DEST_PREFIX = "config_flag__"


class UsageError(ConfigError):
    """A bad command-line argument or flag value; the command exits 2 (like argparse)."""


_LOADED_ATTR = "_ctxfold_loaded_config"


def number_in(low: float, high: float | None = None, *, kind: type = int) -> Any:
    """An argparse ``type`` for a number in ``[low, high]``: anything else is a usage error
    (argparse prints it and exits 2), before the command runs."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value != value or value in (float("inf"), float("-inf")) or value < low or (
                high is not None and value > high):  # nan/inf would defeat any cap
            allowed = f"{low} to {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"{text} is out of range (allowed: {allowed})")
        return value
    return parse


def add_config_flag(
    parser: argparse.ArgumentParser, key: str, flag: str | None = None, *, help: str = ""
) -> None:
    """Add ``flag`` (default ``--<key with dashes>``) overriding config ``key`` ("section.key").

    The value is parsed by the field's type (like an environment variable) and validated
    with the rest of the configuration.
    """
    flag = flag or "--" + key.rpartition(".")[2].replace("_", "-")
    parser.add_argument(
        flag,
        dest=_FLAG_DEST_PREFIX + key.replace(".", "__"),
        metavar="VALUE",
        default=None,
        help=help or f"override config {key}",
    )
    flags = parser.get_default("config_flag_names") or {}
    parser.set_defaults(config_flag_names={**flags, key: flag})


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The ``section.key -> value`` overrides given on the command line."""
    overrides: dict[str, Any] = dict(getattr(args, "config_overrides", None) or {})
    for dest, value in vars(args).items():
        if dest.startswith(_FLAG_DEST_PREFIX) and value is not None:
            overrides[dest.removeprefix(_FLAG_DEST_PREFIX).replace("__", ".")] = value
    return overrides


def print_notices(loaded: LoadedConfig) -> None:
    """Print the config notices (e.g. the one migration notice) to stderr."""
    for notice in loaded.notices:
        print(f"ctxfold: notice: {notice}", file=sys.stderr)


def load_cli_config(args: argparse.Namespace) -> LoadedConfig:
    """The effective config for this invocation (``--config`` and command flags applied).

    Loaded once per invocation (cached on ``args``); notices are printed to stderr once.
    """
    cached = getattr(args, _LOADED_ATTR, None)
    if cached is not None:
        return cached
    from ctxfold.config.load import load_config

    config_path = getattr(args, "config", None)
    overrides = config_overrides(args)
    try:
        loaded = load_config(config_path=config_path, cli_overrides=overrides,
                             flag_names=getattr(args, "config_flag_names", None) or {})
    except ConfigError as exc:
        if overrides and _loads_without_flags(config_path):
            raise UsageError(str(exc)) from None  # the files are fine: a flag value is bad
        raise
    print_notices(loaded)
    setattr(args, _LOADED_ATTR, loaded)
    return loaded


def _loads_without_flags(config_path: str | None) -> bool:
    from ctxfold.config.load import load_config

    try:
        load_config(config_path=config_path)
    except ConfigError:
        return False
    return True


def load_registry(args: argparse.Namespace, *, validate: bool = True) -> Registry:
    """The strategy registry, honouring ``[plugins] disabled``.

    With ``validate`` (every command but the diagnostic ones: ``plugins``, ``config``), a
    strategy name in config that no plugin registers fails here, naming the file, the key,
    the value and the available names.
    """
    import sys

    from ctxfold.config.load import validate_strategy_names
    from ctxfold.kernel.plugin_manager import unknown_disabled
    from ctxfold.kernel.registry import Registry

    loaded = load_cli_config(args)
    disabled = loaded.config.plugins.disabled
    for name in unknown_disabled(disabled):
        print(f"ctxfold: warning: {loaded.sources.get('plugins.disabled', 'config')}: "
              f"plugins.disabled names {name!r}, which is no built-in plugin module (e.g. "
              "'estimators.heuristic') and no installed entry point; nothing was disabled "
              "for it", file=sys.stderr)
    registry = Registry.from_config(loaded.config)
    if validate:
        validate_strategy_names(loaded, registry)
    return registry


def wait_until_stopped(stop: Any, ready: Any, stopping: Any) -> int:
    """For commands that serve until interrupted: signal ``ready`` (when given), wait for
    ``stop`` (a ``threading.Event``; default: Ctrl-C), then call ``stopping()``; exit 0."""
    import threading

    if ready is not None:
        ready.set()
    waiter = stop or threading.Event()
    try:
        while not waiter.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        stopping()
    return 0

