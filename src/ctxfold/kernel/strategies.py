"""Strategy descriptors and the protocols the kernel expects from each strategy family.

A plugin *registers* strategies by returning descriptors from a registration hook (see
:mod:`ctxfold.kernel.hookspecs`); the kernel *selects* one by the name in config and calls
its ``factory`` with a :class:`StrategyContext`. Descriptors are small, frozen and cheap:
heavy imports (tokenizers, HTTP clients) happen inside the factory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import attrs

from ctxfold.kernel.types import Message, RequestShape, ToolSchema, Usage

if TYPE_CHECKING:
    from ctxfold.config.schema import Config
    from ctxfold.kernel.registry import Registry

Kind = Literal[
    "estimator",
    "pruner",
    "summarizer",
    "store",
    "provider",
    "sidecar_format",
    "config_migration",
    "importer",
    "policy",
]


@attrs.frozen
class StrategyContext:
    """What a factory gets: the effective config and the registry (for other strategies)."""

    config: Config
    registry: Registry
    options: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class StrategySpec:
    """A named strategy registered by a plugin.

    ``factory(context)`` builds the strategy object. ``source`` is filled in by the registry
    (the plugin that registered it); plugins leave it empty.
    """

    kind: Kind
    name: str
    factory: Callable[[StrategyContext], Any]
    description: str = ""
    source: str = ""


# -- protocols --------------------------------------------------------------------------------


@runtime_checkable
class Estimator(Protocol):
    """Counts the tokens of a whole request shape (SPEC §3.1).

    Implementations must be incremental: per-message counts are cached by fingerprint so
    estimating turn n+1 does not re-tokenize turns 1..n.
    """

    name: str

    def estimate(self, shape: RequestShape) -> int:
        """Return the (calibrated) admission estimate of ``shape`` in tokens."""
        ...

    def calibrate(self, shape: RequestShape, usage: Usage) -> bool:
        """Learn from the provider's prompt tokens for exactly ``shape``; True if accepted."""
        ...

    def reset_calibration(self) -> None:
        """Forget calibration (model change)."""
        ...


@runtime_checkable
class Pruner(Protocol):
    """Shrinks oversized tool results of a view; returns ``None`` when nothing changed."""

    def prune(self, view: Sequence[Message]) -> tuple[list[Message], int] | None:
        """Return (pruned view, number of tool results pruned) or ``None``."""
        ...


@attrs.frozen
class SummaryRequest:
    """A summary request in the cache-aligned shape of SPEC §3.4."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...]
    max_tokens: int
    focus: str | None = None
    #: The session's ``prompt_cache_key``, so the summary shares the normal requests' cache.
    cache_key: str = ""


@attrs.frozen
class SummaryResult:
    """What a summarizer returns: the briefing text and why it stopped."""

    text: str
    finish_reason: str = "stop"
    usage: Usage | None = None


@runtime_checkable
class Summarizer(Protocol):
    """Produces the structured summary of a fold region in exactly one call, never retried."""

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Summarize ``request``; raise on transport failure."""
        ...


@runtime_checkable
class Store(Protocol):
    """Durable storage of canonical transcripts and sidecars."""

    def exists(self, session_id: str) -> bool: ...

    def create(self, session_id: str) -> None: ...

    def load(self, session_id: str) -> list[Message]: ...

    def append(self, session_id: str, messages: Sequence[Message]) -> None: ...

    def read_sidecar(self, session_id: str) -> bytes | None: ...

    def write_sidecar(self, session_id: str, data: bytes) -> None: ...

    def discard_sidecar(self, session_id: str, reason: str) -> None: ...

    def last_activity(self, session_id: str) -> float | None: ...

    def list_sessions(self) -> list[str]: ...

    def fork(self, source_id: str, target_id: str, upto: int | None = None) -> None: ...

    def rewind(self, session_id: str, upto: int) -> None: ...

    def delete(self, session_id: str) -> None: ...


# -- providers ---------------------------------------------------------------------------------

#: Prompt-cache TTL in minutes by provider (SPEC §2), used only to label a resume warm/cold.
#: Provider plugins report theirs from this table; ``UNKNOWN_CACHE_TTL_MINUTES`` otherwise.
CACHE_TTL_MINUTES = {"deepseek": 24 * 60, "mimo": 24 * 60, "responses": 10, "anthropic": 5}
UNKNOWN_CACHE_TTL_MINUTES = 24 * 60


@attrs.frozen
class ChatRequest:
    """A provider-independent model request.

    ``max_output_tokens`` 0 means provider auto (DeepSeek: field omitted; MiMo/Responses:
    the ladder). ``effort`` is the reasoning depth (``none``/``low``/``medium``/``high``/``max``).
    ``cache_key`` is the session's ``prompt_cache_key`` (SPEC §3.8). ``output_room`` is what
    the shared context window leaves for output after the prompt (0 = unknown): translators
    clip every output budget to it, and DeepSeek sends ``max_tokens`` only when it is tighter
    than the server's own cap (origin §3.13).
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...] = ()
    model: str = ""
    max_output_tokens: int = 0
    effort: str = "high"
    stream: bool = True
    cache_key: str = ""
    output_room: int = 0
    #: Transport retries for this request (``None``: the provider's setting). Summary
    #: requests use 0: exactly one call, no retry (SPEC §3.4).
    max_retries: int | None = None


@attrs.frozen
class ChatResponse:
    """The assembled answer of one request."""

    message: Message
    finish_reason: str = "stop"
    usage: Usage = attrs.field(factory=Usage)
    request_id: str = ""


@runtime_checkable
class Provider(Protocol):
    """A model endpoint. The kernel owns HTTP; plugins translate requests and responses."""

    name: str
    context_window: int
    cache_ttl_minutes: int
    supports_native_compaction: bool

    def complete(self, request: ChatRequest) -> ChatResponse:
        """Send ``request`` and return the assembled response; raise a ProviderError."""
        ...
