"""Value objects of ctxfold.

Every type here is an ``attrs`` frozen class that knows nothing about JSON; all
(un)structuring lives in :mod:`ctxfold.kernel.convert`. Names follow SPEC.md: a
``Message`` belongs to the canonical ``Transcript``; a ``Projection`` is the frozen body
that replaces ``canonical[:covered_count]`` in the provider-visible view; a ``Receipt``
records the outcome of one maintenance operation; ``SidecarState`` is the content of
``<session>.context.json`` (schema v3).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import attrs

Role = Literal["system", "user", "assistant", "tool"]
Origin = Literal["user", "host"]
Trigger = Literal["pressure", "manual", "overflow", "tool"]

SIDECAR_SCHEMA_VERSION = 3


def utc_now() -> str:
    """Return the current time as an ISO-8601 UTC string (the format of every timestamp)."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_time(value: str) -> datetime | None:
    """Parse an ISO-8601 timestamp written by :func:`utc_now`; ``None`` when empty/invalid."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class CacheState(enum.StrEnum):
    """Provider prompt-cache state label, set only by ``resume()`` (SPEC §3.8)."""

    WARM = "warm"
    COLD = "cold"
    UNKNOWN = "unknown"

    @classmethod
    def coerce(cls, value: object) -> CacheState:
        """Any unknown label reads as ``unknown`` (origin §2.4)."""
        try:
            return cls(str(value))
        except ValueError:
            return cls.UNKNOWN


class ReceiptStatus(enum.StrEnum):
    PLANNED = "planned"
    APPLIED = "applied"
    NOOP = "noop"
    BLOCKED = "blocked"
    FAILED = "failed"


class ReceiptAction(enum.StrEnum):
    PRUNE = "prune"
    SUMMARY = "summary"
    NOOP = "noop"
    # Legacy actions: readable in old sidecars, never written.
    SNIP = "snip"
    NATIVE_TOOL_CLEAR = "native_tool_clear"


@attrs.frozen
class ToolCall:
    """One function call requested by an assistant message (``arguments`` is a JSON string)."""

    id: str
    name: str
    arguments: str = ""


@attrs.frozen
class Message:
    """One canonical transcript message.

    ``content`` is the provider-visible text. For tool results it is bounded at creation
    (≤ 32 KiB) and ``raw_content`` holds the complete text, which is never sent to a
    provider and never enters a fingerprint. ``local_only`` messages are displayed but never
    sent. ``origin`` tells whether the user or the host (ctxfold itself) wrote it.
    ``partial`` marks an assistant message whose stream was cut off.
    """

    role: Role
    content: str = ""
    raw_content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning_content: str | None = None
    origin: Origin = "user"
    local_only: bool = False
    partial: bool = False
    created_at: str = ""
    id: str = ""


@attrs.frozen
class Usage:
    """Token usage reported by a provider for one request.

    ``aggregated`` marks counts summed over retries or several requests; such counts never
    calibrate an estimator (origin bug #7930). ``estimated`` marks counts that a provider did
    not report but ctxfold guessed.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_hit_tokens: int = 0
    cache_miss_tokens: int = 0
    reasoning_tokens: int = 0
    estimated: bool = False
    aggregated: bool = False


@attrs.frozen
class Projection:
    """The frozen body that stands for ``canonical[:covered_count]`` (SPEC §4.2)."""

    messages: tuple[Message, ...]
    transcript_version: int = 0
    projection_version: int = 0
    covered_count: int = 0
    covered_prefix_hash: str = ""
    summary_hash: str = ""
    source_tokens: int = 0
    projection_tokens: int = 0
    view_input_hash: str = ""
    view_output_hash: str = ""
    created_at: str = ""


@attrs.frozen
class Receipt:
    """The outcome of one maintenance operation (SPEC §4.2 ``last_receipt``)."""

    operation_id: str
    status: ReceiptStatus
    action: ReceiptAction
    trigger: str = "pressure"
    projection_version: int = 0
    covered_count: int = 0
    covered_prefix_hash: str = ""
    input_hash: str = ""
    output_hash: str = ""
    input_tokens: int = 0
    result_tokens: int = 0
    saved_tokens: int = 0
    affected_tool_results: int = 0
    summary_hash: str = ""
    cache_break: bool = False
    reason: str = ""
    created_at: str = ""
    generation: int = 0


@attrs.frozen
class TelemetryRecord:
    """One telemetry entry: a prepare that acted, an install, or a resume."""

    kind: Literal["prepare", "install", "resume"]
    trigger: str = ""
    action: str = ""
    tokens_before: int = 0
    tokens_after: int = 0
    saved_tokens: int = 0
    summary_calls: int = 0
    cache_state: CacheState = CacheState.UNKNOWN
    cache_hit_tokens: int = 0
    cache_miss_tokens: int = 0
    projection_version: int = 0
    detail: str = ""
    created_at: str = ""


@attrs.frozen
class SidecarState:
    """The content of ``<session>.context.json`` in schema v3 (SPEC §4.2)."""

    schema_version: int = SIDECAR_SCHEMA_VERSION
    transcript_version: int = 0
    projection: Projection | None = None
    prompt_cache_key: str = ""
    last_cache_state: CacheState = CacheState.UNKNOWN
    generation: int = 0
    last_receipt: Receipt | None = None
    telemetry: tuple[TelemetryRecord, ...] = ()
    updated_at: str = ""


@attrs.frozen
class ToolSchema:
    """One function tool offered to the model (OpenAI function-schema fields)."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class RequestShape:
    """What an estimator counts: the provider-visible messages plus the tool schemas."""

    messages: Sequence[Message]
    tools: Sequence[ToolSchema] = ()
