"""The persisted state of a session: projection, receipts, telemetry, the sidecar document.

A :class:`Projection` is the frozen body that stands for ``canonical[:covered_count]`` in the
view; a :class:`Receipt` records the outcome of one maintenance operation; a
:class:`SidecarState` is the content of ``<session>.context.json`` (schema v3, design §5.5).
Frozen ``attrs`` classes that know nothing about JSON (see :mod:`ctxfold.kernel.codec`).
"""

from __future__ import annotations

import enum
from typing import Literal

import attrs

from ctxfold.kernel.ledger import LedgerEntry
from ctxfold.kernel.types import Message

SIDECAR_SCHEMA_VERSION = 3


class CacheState(enum.StrEnum):
    """Provider prompt-cache state label, set only by ``resume()`` (design §6.3)."""

    WARM = "warm"
    COLD = "cold"
    UNKNOWN = "unknown"

    @classmethod
    def coerce(cls, value: object) -> CacheState:
        """Any unknown label reads as ``unknown`` (design §6.3)."""
        try:
            return cls(str(value))
        except ValueError:
            return cls.UNKNOWN


class Action(enum.StrEnum):
    """The one vocabulary of what maintenance did (design §5.2). A receipt's ``action`` is
    the operation (``prune``, ``summary``, ``noop``: nothing to fold) and its ``status``
    how it ended (``applied``, ``noop``, ``blocked``, ``failed``); a prepare's action is the
    operation it applied, else the status of the attempt it recorded, else ``none``; a
    telemetry record's ``action`` is ``<action>:<status>``; a fold that lost its
    compare-and-swap ended ``stale`` (and recorded a ``blocked`` receipt)."""

    NONE = "none"
    PRUNE = "prune"
    SUMMARY = "summary"
    NOOP = "noop"
    APPLIED = "applied"
    BLOCKED = "blocked"
    FAILED = "failed"
    STALE = "stale"


#: What a receipt's ``action`` may be, and its ``status``.
RECEIPT_ACTIONS = frozenset({Action.PRUNE, Action.SUMMARY, Action.NOOP})
RECEIPT_STATUSES = frozenset({Action.APPLIED, Action.NOOP, Action.BLOCKED, Action.FAILED})


@attrs.frozen
class Projection:
    """The frozen body that stands for ``canonical[:covered_count]`` (design §5.4)."""

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
    """The outcome of one maintenance operation (design §5.2)."""

    operation_id: str
    status: Action = attrs.field(validator=attrs.validators.in_(RECEIPT_STATUSES))
    action: Action = attrs.field(validator=attrs.validators.in_(RECEIPT_ACTIONS))
    #: A :data:`~ctxfold.kernel.types.Trigger` when ctxfold wrote it; sidecars of older
    #: systems may hold other labels, which are kept as they are.
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
    #: A summary install's check: the weighted share of its fold region's critical probes
    #: the candidate carried before and after the repair (``None``: not checked), and the
    #: facts the repair appended verbatim.
    probes_before: float | None = None
    probes_after: float | None = None
    repaired: tuple[str, ...] = ()


@attrs.frozen
class TelemetryRecord:
    """One telemetry entry: a prepare that acted, an install, a resume, or a ``thrash``
    the guard saw (``action``: ``refill``, ``same-span`` or ``cap``; ``detail`` says what
    it saw and did; :mod:`ctxfold.kernel.maintenance`, the thrash guard).

    An install record carries its fold's cache :class:`~ctxfold.kernel.ledger.LedgerEntry`
    (``ledger``; ``None`` in older sidecars), completed in memory as requests are sent on
    its view and written with the session's next sidecar write.
    """

    kind: Literal["prepare", "install", "resume", "thrash"]
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
    ledger: LedgerEntry | None = None
    #: The model turn the record was made in (``None``: not known, an older record); the
    #: thrash guard measures how soon a checkpoint refilled by it.
    turn: int | None = None


@attrs.frozen
class SessionSettings:
    """What a session ran with at its last sidecar write (``ctxfold inspect`` shows it)."""

    window: int = 0
    trigger_tokens: int = 0
    compact_ratio: float = 0.0
    model: str = ""
    provider: str = ""
    estimator: str = ""


@attrs.frozen
class SidecarState:
    """The content of ``<session>.context.json`` in schema v3 (design §5.5)."""

    schema_version: int = SIDECAR_SCHEMA_VERSION
    transcript_version: int = 0
    projection: Projection | None = None
    prompt_cache_key: str = ""
    last_cache_state: CacheState = CacheState.UNKNOWN
    generation: int = 0
    last_receipt: Receipt | None = None
    telemetry: tuple[TelemetryRecord, ...] = ()
    updated_at: str = ""
    settings: SessionSettings | None = None


def label_cache(
    last_activity: float | None, now: float, ttl_minutes: int
) -> tuple[CacheState, float | None]:
    """The resume label (design §6.3) and the idle seconds: no activity known → ``unknown``;
    idle ≥ the provider's TTL → ``cold``; else ``warm``."""
    if last_activity is None:
        return CacheState.UNKNOWN, None
    idle = max(0.0, now - last_activity)
    return (CacheState.COLD if idle >= ttl_minutes * 60 else CacheState.WARM), idle
