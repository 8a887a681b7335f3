"""Sidecar codec ``v3``: reads every historic sidecar form, writes schema 3 (design §5.5).

Historic forms (design §5.5) and how they are read (details in ``docs/formats.md``):

* **v1** (``schema_version`` 1, 0 or missing): no ``generation``, no ``last_receipt``;
  maintenance outcome mirrored in ``last_*`` and ``blocked_*`` fields.
* **v2**: adds ``generation`` and ``last_receipt`` (receipts lack ``saved_tokens``,
  ``affected_tool_results``, ``cache_break``, ``output_hash``, ``generation``); still writes
  the ``last_*``/``blocked_*`` mirrors.
* **v3**: the current form; earlier writers also left legacy native-editing flags.

Legacy fields are accepted and ignored, and never written. Legacy receipt actions are
mapped on read (:data:`LEGACY_RECEIPT_ACTIONS`: ``snip`` and ``native_tool_clear`` read as
``prune``). A receipt whose ``status`` or ``action`` is not a known label is dropped
(receipts are diagnostics, and an unknown label cannot be acted on) — so is a legacy
``planned`` receipt, an operation its writer had not carried out. An unknown cache-state
label reads as ``unknown``. A schema above 3 raises :class:`SidecarVersionError`.
Everything else that is not the documented shape raises :class:`SidecarError`, and the
kernel discards the file and rebuilds.

Decoding is strict about types (a string where a count belongs is an error, not a
coercion) so a damaged file is recognised as damaged.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from ctxfold.kernel.codec import converter, message_to_dict
from ctxfold.kernel.compat import LEGACY_RECEIPT_ACTIONS
from ctxfold.kernel.errors import SidecarError, SidecarVersionError
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import StrategyContext, StrategySpec
from ctxfold.kernel.state import (
    RECEIPT_ACTIONS,
    RECEIPT_STATUSES,
    SIDECAR_SCHEMA_VERSION,
    CacheState,
    Projection,
    Receipt,
    SessionSettings,
    SidecarState,
    TelemetryRecord,
)

_TELEMETRY_KINDS = frozenset(("prepare", "install", "resume", "thrash"))
_SETTINGS = frozenset(f.name for f in attrs.fields(SessionSettings))


def _fields(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in attrs.fields(type(obj)):
        value = getattr(obj, field.name)
        if attrs.has(type(value)):  # a nested record (an install's ledger)
            value = _fields(value)
        out[field.name] = value.value if isinstance(value, enum.Enum) else value
    return out


class SidecarV3Codec:
    """Decode any known sidecar form into :class:`SidecarState`; encode schema 3."""

    name = "v3"
    schema_version = SIDECAR_SCHEMA_VERSION

    def __init__(self) -> None:
        self._conv = converter

    # -- decode --------------------------------------------------------------------------------

    def decode(self, data: Mapping[str, Any]) -> SidecarState:
        """Decode a parsed sidecar document.

        Raises :class:`SidecarVersionError` for a schema above 3 and :class:`SidecarError`
        (naming the offending key) for anything that is not a known sidecar shape.
        """
        if not isinstance(data, Mapping):
            raise SidecarError(f"sidecar must be a JSON object, got {type(data).__name__}")
        self._version(data.get("schema_version", 0))
        generation = self._get(data, "generation", int, 0)
        telemetry = data.get("telemetry") or []
        if not isinstance(telemetry, list):
            raise SidecarError(f"sidecar.telemetry must be a list, got {type(telemetry).__name__}")
        projection = data.get("projection")
        return SidecarState(
            schema_version=SIDECAR_SCHEMA_VERSION,
            transcript_version=self._get(data, "transcript_version", int, 0),
            projection=None if projection is None else self._get(data, "projection", Projection),
            prompt_cache_key=self._get(data, "prompt_cache_key", str, ""),
            last_cache_state=CacheState.coerce(data.get("last_cache_state", "unknown")),
            generation=generation,
            last_receipt=self._receipt(data.get("last_receipt"), generation),
            telemetry=tuple(
                self._structure(record, TelemetryRecord, f"sidecar.telemetry[{i}]")
                for i, record in enumerate(telemetry)
                # An unknown kind label is dropped, like an unknown receipt label.
                if not isinstance(record, Mapping) or (isinstance(record.get("kind"), str)
                                                       and record["kind"] in _TELEMETRY_KINDS)
            ),
            updated_at=self._get(data, "updated_at", str, ""),
            settings=self._settings(data.get("settings")),
        )

    def _settings(self, data: Any) -> SessionSettings | None:
        # What the session ran with is shown by `inspect`, never acted on: a damaged record
        # reads as none rather than discarding the checkpoint beside it.
        if not isinstance(data, Mapping):
            return None
        try:
            settings: SessionSettings = self._conv.structure(
                {k: v for k, v in data.items() if k in _SETTINGS}, SessionSettings)
        except Exception:
            return None
        return settings

    @staticmethod
    def _version(value: Any) -> int:
        if value is None:
            return 1
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SidecarError(
                f"sidecar.schema_version {value!r} is not a non-negative integer"
            )
        if value > SIDECAR_SCHEMA_VERSION:
            raise SidecarVersionError(
                f"sidecar schema_version {value} was written by a newer ctxfold (this one "
                f"knows up to {SIDECAR_SCHEMA_VERSION}); upgrade ctxfold to open this session"
            )
        return value or 1  # schema 0 is v1 (design §5.5)

    def _get(self, data: Mapping[str, Any], key: str, cls: Any, default: Any = None) -> Any:
        return self._structure(data.get(key, default), cls, f"sidecar.{key}")

    def _structure(self, value: Any, cls: Any, path: str) -> Any:
        try:
            return self._conv.structure(value, cls)
        except Exception as exc:
            from cattrs import transform_error

            detail = "; ".join(transform_error(exc, path=path))
            raise SidecarError(f"invalid sidecar: {detail}") from None

    def _receipt(self, data: Any, generation: int) -> Receipt | None:
        if data is None:
            return None
        if not isinstance(data, Mapping):
            raise SidecarError(
                f"sidecar.last_receipt must be an object, got {type(data).__name__}"
            )
        status, action = data.get("status"), data.get("action")
        if isinstance(action, str):
            action = LEGACY_RECEIPT_ACTIONS.get(action, action)
        # Labels are strings: anything else (a list, an object) is an unknown label, dropped.
        if not (isinstance(status, str) and status in RECEIPT_STATUSES
                and isinstance(action, str) and action in RECEIPT_ACTIONS):
            return None
        fields = {**data, "action": action}
        # Receipts before ctxfold's own v3 had no generation: they were recorded at the
        # state's generation (a blocked receipt does not bump it).
        fields.setdefault("generation", generation)
        receipt: Receipt = self._structure(fields, Receipt, "sidecar.last_receipt")
        return receipt

    # -- encode --------------------------------------------------------------------------------

    def encode(self, state: SidecarState) -> dict[str, Any]:
        """The schema-3 document for ``state``: every field present, legacy fields absent."""
        projection = None
        if state.projection is not None:
            projection = _fields(state.projection)
            projection["messages"] = [message_to_dict(m) for m in state.projection.messages]
        return {
            "schema_version": SIDECAR_SCHEMA_VERSION,
            "transcript_version": state.transcript_version,
            "projection": projection,
            "prompt_cache_key": state.prompt_cache_key,
            "last_cache_state": CacheState.coerce(state.last_cache_state).value,
            "generation": state.generation,
            "last_receipt": None if state.last_receipt is None else _fields(state.last_receipt),
            "telemetry": [_telemetry(record) for record in state.telemetry],
            "updated_at": state.updated_at,
            "settings": None if state.settings is None else _fields(state.settings),
        }


def _telemetry(record: TelemetryRecord) -> dict[str, Any]:
    out = _fields(record)
    if record.ledger is None:  # a record without one is written as before the ledger
        del out["ledger"]
    return out


def _create(context: StrategyContext) -> SidecarV3Codec:
    return SidecarV3Codec()


@hookimpl
def ctxfold_sidecar_formats() -> list[StrategySpec]:
    """Register the sidecar codec ``v3``."""
    return [
        StrategySpec(
            name="v3",
            default=True,
            factory=_create,
            description="reads sidecar schemas 1-3 (legacy fields ignored), writes schema 3",
        )
    ]
