"""ctxfold: context maintenance for long-running LLM agents.

The canonical transcript is kept forever; the provider-visible request stays a byte-stable
extension of the previous one until ``compact_ratio`` of the window is reached, when
oversized tool results are pruned and, if needed, a checkpoint (system prompt + one
structured summary + the recent ~16% of the window) is installed.

Everything a host needs is importable from here (``__all__``); deeper modules are the
implementation. Importing ``ctxfold`` is light: names are resolved on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_ERRORS = (
    "CtxfoldError", "ConfigError", "ConfigSyntaxError", "PluginError", "MessageError",
    "SessionError", "ToolResultError", "ImporterError", "StoreError", "SidecarError",
    "SidecarVersionError", "StaleContextError", "MaintenanceError", "CompactionRequiredError",
    "SummaryFailedError", "PolicyFailedError", "SmokeError", "ProviderError",
    "AuthenticationError", "RateLimitError", "ContextLimitError", "ServerError",
    "ProviderConnectionError", "ProviderTimeoutError", "ProviderResponseError",
    "ProviderRequestError",
)
_EXPORTS = {
    **dict.fromkeys(_ERRORS, "ctxfold.kernel.errors"),
    "ContextManager": "ctxfold.engine.manager",
    "open_session": "ctxfold.engine.manager",
    "ResumeResult": "ctxfold.engine.manager",
    "PreparedRequest": "ctxfold.engine.prepared",
    "load_config": "ctxfold.config.load",
    "LoadedConfig": "ctxfold.config.load",
    "Config": "ctxfold.kernel.config",
    "Message": "ctxfold.kernel.types",
    "ToolCall": "ctxfold.kernel.types",
    "ToolSchema": "ctxfold.kernel.types",
    "Usage": "ctxfold.kernel.types",
    "ChatRequest": "ctxfold.kernel.types",
    "ChatResponse": "ctxfold.kernel.types",
    "SummaryRequest": "ctxfold.kernel.types",
    "SummaryResult": "ctxfold.kernel.types",
    "Projection": "ctxfold.kernel.state",
    "Receipt": "ctxfold.kernel.state",
    "CacheState": "ctxfold.kernel.state",
    "SidecarState": "ctxfold.kernel.state",
    "hookimpl": "ctxfold.kernel.hookspecs",
    "StrategySpec": "ctxfold.kernel.contracts",
    "ProviderDefaults": "ctxfold.kernel.contracts",
    "Registry": "ctxfold.kernel.registry",
    "message_from_openai": "ctxfold.interop.chat",
    "message_to_openai": "ctxfold.interop.chat",
}

__all__ = ["__version__", *sorted(_EXPORTS)]

if TYPE_CHECKING:  # pragma: no cover
    from ctxfold.config.load import LoadedConfig, load_config
    from ctxfold.engine.manager import ContextManager, ResumeResult, open_session
    from ctxfold.engine.prepared import PreparedRequest
    from ctxfold.interop.chat import message_from_openai, message_to_openai
    from ctxfold.kernel.config import Config
    from ctxfold.kernel.contracts import ProviderDefaults, StrategySpec
    from ctxfold.kernel.errors import (
        AuthenticationError,
        CompactionRequiredError,
        ConfigError,
        ConfigSyntaxError,
        ContextLimitError,
        CtxfoldError,
        ImporterError,
        MaintenanceError,
        MessageError,
        PluginError,
        PolicyFailedError,
        ProviderConnectionError,
        ProviderError,
        ProviderRequestError,
        ProviderResponseError,
        ProviderTimeoutError,
        RateLimitError,
        ServerError,
        SessionError,
        SidecarError,
        SidecarVersionError,
        SmokeError,
        StaleContextError,
        StoreError,
        SummaryFailedError,
        ToolResultError,
    )
    from ctxfold.kernel.hookspecs import hookimpl
    from ctxfold.kernel.registry import Registry
    from ctxfold.kernel.state import CacheState, Projection, Receipt, SidecarState
    from ctxfold.kernel.types import (
        ChatRequest,
        ChatResponse,
        Message,
        SummaryRequest,
        SummaryResult,
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
