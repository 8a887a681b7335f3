"""ctxfold: context maintenance for long-running LLM agents.

The canonical transcript is kept forever; the provider-visible request stays a byte-stable
extension of the previous one until ``compact_ratio`` of the window is reached, when
oversized tool results are pruned and, if needed, a checkpoint (system prompt + one
structured summary + the recent ~5% of the window) is installed.

Everything a host needs is importable from here (``__all__``); deeper modules are the
implementation. Importing ``ctxfold`` is light: names are resolved on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_ERRORS = (
    "CtxfoldError", "ConfigError", "ConfigSyntaxError", "PluginError", "MessageError",
    "SessionError", "ToolResultError", "ImporterError", "StoreError", "AppendError",
    "SidecarError",
    "SidecarVersionError", "StaleContextError", "MaintenanceError", "CompactionRequiredError",
    "SummaryFailedError", "SummarizerError", "SummaryCapError", "PolicyFailedError",
    "SmokeError", "ProviderError",
    "AuthenticationError", "RateLimitError", "ContextLimitError", "ServerError",
    "ProviderConnectionError", "ProviderTimeoutError", "ProviderResponseError",
    "ProviderRequestError",
)
_KINDS = (
    "StrategySpec", "StrategyContext", "ProviderDefaults", "NoOptions", "EstimatorOptions",
    "StoreOptions",
    "ProviderOptions", "SummarizerOptions", "ImporterOptions", "PolicyOptions",
)
_CONTRACTS = (
    "Estimator", "IncrementalEstimator", "Pruner", "Summarizer", "AsyncSummarizer", "Store",
    "SidecarCodec", "Provider", "AsyncProvider", "StreamAssembler",
    "Translator", "ConfigMigration", "Importer", "Policy",
)
_EXPORTS = {
    **dict.fromkeys(_ERRORS, "ctxfold.kernel.errors"),
    "ContextManager": "ctxfold.engine.manager",
    "SessionWarning": "ctxfold.engine.parts",
    "open_session": "ctxfold.engine.opening",
    "create_provider": "ctxfold.engine.opening",
    "ResumeResult": "ctxfold.engine.prepared",
    "UsageObservation": "ctxfold.engine.prepared",
    "PreparedRequest": "ctxfold.engine.prepared",
    "to_openai": "ctxfold.engine.prepared",
    "to_responses": "ctxfold.engine.prepared",
    "load_config": "ctxfold.config.load",
    "replay_paths": "ctxfold.replay",
    "Emulator": "ctxfold.emulator.server",
    "EmulatorOptions": "ctxfold.emulator.plugin",
    "Fault": "ctxfold.emulator.faults",
    "ReplySpec": "ctxfold.emulator.script",
    "CountStore": "ctxfold.kernel.contracts",
    "LazyLines": "ctxfold.kernel.contracts",
    "PrefixStore": "ctxfold.kernel.contracts",
    "Transcript": "ctxfold.engine.transcript",
    "ReplaySettings": "ctxfold.replay",
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
    "Action": "ctxfold.kernel.state",
    "CacheState": "ctxfold.kernel.state",
    "SidecarState": "ctxfold.kernel.state",
    "ForkPoint": "ctxfold.kernel.types",
    "ForkPoints": "ctxfold.kernel.contracts",
    "RequestShape": "ctxfold.kernel.types",
    "TextStats": "ctxfold.kernel.types",
    "SseEvent": "ctxfold.kernel.types",
    "ImportedSession": "ctxfold.kernel.sessions",
    "PolicyRequest": "ctxfold.kernel.sessions",
    "SummaryCall": "ctxfold.kernel.sessions",
    "Appended": "ctxfold.kernel.types",
    # writing plugins: the hook marker, descriptors, contexts, typed options, protocols
    "hookimpl": "ctxfold.kernel.hookspecs",
    "Registry": "ctxfold.kernel.registry",
    **dict.fromkeys(_KINDS, "ctxfold.kernel.kinds"),
    **dict.fromkeys(_CONTRACTS, "ctxfold.kernel.contracts"),
    # helpers plugins build on
    "TokenizerEstimator": "ctxfold.plugins.estimators.base",
    "SessionBuilder": "ctxfold.importing",
    "import_session": "ctxfold.importing",
    "HttpProvider": "ctxfold.transport.provider",
    "build_http_provider": "ctxfold.transport.provider",
    "ChatCompletionsTranslator": "ctxfold.plugins.providers._chat",
    "USE_CAPABILITY_TOOL": "ctxfold.capabilities.tool",
    "message_from_openai": "ctxfold.interop.chat",
    "message_to_openai": "ctxfold.interop.chat",
}

__all__ = ["__version__", *sorted(_EXPORTS)]

if TYPE_CHECKING:  # pragma: no cover
    from ctxfold.capabilities.tool import USE_CAPABILITY_TOOL
    from ctxfold.config.load import LoadedConfig, load_config
    from ctxfold.emulator.faults import Fault
    from ctxfold.emulator.plugin import EmulatorOptions
    from ctxfold.emulator.script import ReplySpec
    from ctxfold.emulator.server import Emulator
    from ctxfold.engine.manager import ContextManager
    from ctxfold.engine.opening import create_provider, open_session
    from ctxfold.engine.parts import SessionWarning
    from ctxfold.engine.prepared import (
        PreparedRequest,
        ResumeResult,
        UsageObservation,
        to_openai,
        to_responses,
    )
    from ctxfold.engine.transcript import Transcript
    from ctxfold.importing import SessionBuilder, import_session
    from ctxfold.interop.chat import message_from_openai, message_to_openai
    from ctxfold.kernel.config import Config
    from ctxfold.kernel.contracts import (
        AsyncProvider,
        AsyncSummarizer,
        ConfigMigration,
        CountStore,
        Estimator,
        ForkPoints,
        Importer,
        IncrementalEstimator,
        LazyLines,
        Policy,
        PrefixStore,
        Provider,
        Pruner,
        SidecarCodec,
        Store,
        StreamAssembler,
        Summarizer,
        Translator,
    )
    from ctxfold.kernel.errors import (
        AppendError,
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
        SummarizerError,
        SummaryCapError,
        SummaryFailedError,
        ToolResultError,
    )
    from ctxfold.kernel.hookspecs import hookimpl
    from ctxfold.kernel.kinds import (
        EstimatorOptions,
        ImporterOptions,
        NoOptions,
        PolicyOptions,
        ProviderDefaults,
        ProviderOptions,
        StoreOptions,
        StrategyContext,
        StrategySpec,
        SummarizerOptions,
    )
    from ctxfold.kernel.registry import Registry
    from ctxfold.kernel.sessions import ImportedSession, PolicyRequest, SummaryCall
    from ctxfold.kernel.state import Action, CacheState, Projection, Receipt, SidecarState
    from ctxfold.kernel.types import (
        Appended,
        ChatRequest,
        ChatResponse,
        ForkPoint,
        Message,
        RequestShape,
        SseEvent,
        SummaryRequest,
        SummaryResult,
        TextStats,
        ToolCall,
        ToolSchema,
        Usage,
    )
    from ctxfold.plugins.estimators.base import TokenizerEstimator
    from ctxfold.plugins.providers._chat import ChatCompletionsTranslator
    from ctxfold.replay import ReplaySettings, replay_paths
    from ctxfold.transport.provider import HttpProvider, build_http_provider


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxfold' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
