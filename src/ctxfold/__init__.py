"""ctxfold: context maintenance for long-running LLM agents.

The canonical transcript is kept forever; the provider-visible request stays a byte-stable
extension of the previous one until ``compact_ratio`` of the window is reached, when
oversized tool results are pruned and, if needed, a checkpoint (system prompt + one
structured summary + the recent ~16% of the window) is installed.

Importing ``ctxfold`` is light: names are resolved on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "CtxfoldError": "ctxfold.kernel.errors",
    "ConfigError": "ctxfold.kernel.errors",
    "PluginError": "ctxfold.kernel.errors",
    "SessionError": "ctxfold.kernel.errors",
    "StoreError": "ctxfold.kernel.errors",
    "SidecarError": "ctxfold.kernel.errors",
    "ContextLimitError": "ctxfold.kernel.errors",
    "CompactionRequiredError": "ctxfold.kernel.errors",
    "Message": "ctxfold.kernel.types",
    "ToolCall": "ctxfold.kernel.types",
    "ToolSchema": "ctxfold.kernel.types",
    "Usage": "ctxfold.kernel.types",
    "Projection": "ctxfold.kernel.types",
    "Receipt": "ctxfold.kernel.types",
    "CacheState": "ctxfold.kernel.types",
    "SidecarState": "ctxfold.kernel.types",
    "Config": "ctxfold.config.schema",
    "hookimpl": "ctxfold.kernel.hookspecs",
    "StrategySpec": "ctxfold.kernel.strategies",
    "make_plugin_manager": "ctxfold.kernel.registry",
    "Registry": "ctxfold.kernel.registry",
    "message_from_openai": "ctxfold.kernel.convert",
    "message_to_openai": "ctxfold.kernel.convert",
}

__all__ = ["__version__", *sorted(_EXPORTS)]

if TYPE_CHECKING:  # pragma: no cover
    from ctxfold.config.schema import Config
    from ctxfold.kernel.convert import message_from_openai, message_to_openai
    from ctxfold.kernel.errors import (
        CompactionRequiredError,
        ConfigError,
        ContextLimitError,
        CtxfoldError,
        PluginError,
        SessionError,
        SidecarError,
        StoreError,
    )
    from ctxfold.kernel.hookspecs import hookimpl
    from ctxfold.kernel.registry import Registry, make_plugin_manager
    from ctxfold.kernel.strategies import StrategySpec
    from ctxfold.kernel.types import (
        CacheState,
        Message,
        Projection,
        Receipt,
        SidecarState,
        ToolCall,
        ToolSchema,
        Usage,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxfold' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
