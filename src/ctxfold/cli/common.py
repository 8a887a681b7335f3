"""Helpers shared by the CLI commands: effective config and registry for parsed arguments."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxfold.config.load import LoadedConfig
    from ctxfold.kernel.registry import Registry


def load_cli_config(args: argparse.Namespace) -> LoadedConfig:
    """The effective config for this invocation (``--config`` and command flags applied)."""
    from ctxfold.config.load import load_config

    return load_config(
        config_path=getattr(args, "config", None),
        cli_overrides=getattr(args, "config_overrides", None) or {},
    )


def load_registry(args: argparse.Namespace) -> Registry:
    """The strategy registry, honouring ``[plugins] disabled``."""
    from ctxfold.kernel.registry import Registry, make_plugin_manager

    loaded = load_cli_config(args)
    return Registry(make_plugin_manager(loaded.config.plugins.disabled))
