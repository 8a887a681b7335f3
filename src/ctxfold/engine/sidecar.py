"""Loading and saving the sidecar ``<session>.context.json`` (design §5.4–§5.7).

The engine never imports the codec plugin: callers pass the codec the registry built
(kind ``sidecar_format``, named by ``[store] sidecar_format``).

Loading never fails because of a damaged sidecar: unreadable bytes, invalid JSON or an
invalid shape discard the file (the store moves it aside) and start from a fresh state,
with a notice. Only a sidecar from a *newer* ctxfold raises, because discarding it would be
a silent downgrade. A decoded projection is then checked against the canonical transcript;
when it no longer matches, only the projection body is dropped (receipts, telemetry and
generation stay).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs

from ctxfold.kernel.compat import is_0_1_flat_hash, promoted
from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import Estimator, SidecarCodec, Store
from ctxfold.kernel.errors import SidecarError, SidecarVersionError
from ctxfold.kernel.fingerprint import chain_hash, covered_prefix_hash
from ctxfold.kernel.state import SIDECAR_SCHEMA_VERSION, SessionSettings, SidecarState
from ctxfold.kernel.types import Message, utc_now
from ctxfold.message_checks import SURROGATE_ESCAPE, repair_surrogates


def session_settings(window: int, trigger_tokens: int, config: Config, estimator: Estimator
                     ) -> SessionSettings:
    """What a session runs with now, as its sidecar records it."""
    return SessionSettings(
        window=window, trigger_tokens=trigger_tokens,
        compact_ratio=config.agent.compact_ratio, model=config.provider.model,
        provider=config.provider.name,
        estimator=str(getattr(estimator, "name", "") or type(estimator).__name__))


def fresh_state() -> SidecarState:
    """The state of a session without a sidecar: no projection, no receipt, generation 0."""
    return SidecarState()


def load_sidecar(
    store: Store, codec: SidecarCodec, session_id: str, canonical: Sequence[Message]
) -> tuple[SidecarState, list[str]]:
    """Load and validate the sidecar of ``session_id``; returns ``(state, notices)``.

    Missing → fresh state. Unreadable, invalid JSON or invalid shape → the store discards
    the file (kept aside for audit) and a fresh state is returned with a notice. Newer schema
    → :class:`SidecarVersionError` (the file is left alone). Nothing is written otherwise:
    a re-normalised or dropped projection is only persisted by the next save.

    ``canonical`` must have been read *after* the sidecar when other processes may write
    (:func:`sidecar_state` says why); a caller that reads both itself uses that.
    """
    return sidecar_state(store, codec, session_id, read_sidecar(store, session_id),
                         canonical)[:2]


def read_sidecar(store: Store, session_id: str) -> bytes | SidecarError | None:
    """The stored sidecar bytes, ``None`` when there are none, or the
    :class:`SidecarError` reading them raised (:func:`sidecar_state` discards such a
    sidecar; an unreadable sidecar never stops a session from opening)."""
    try:
        return store.read_sidecar(session_id)
    except SidecarError as exc:
        return exc


def sidecar_state(
    store: Store, codec: SidecarCodec, session_id: str, raw: bytes | SidecarError | None,
    canonical: Sequence[Message],
) -> tuple[SidecarState, list[str], bool]:
    """The state of the sidecar ``raw`` (what :func:`read_sidecar` returned), validated
    against ``canonical``: ``(state, notices, discarded)`` as :func:`load_sidecar` says;
    ``discarded`` when it was invalid and the store set it aside.

    Read the sidecar first and the transcript second: a projection covers only messages
    that were committed before it was written, so a transcript read afterwards holds all of
    them. Read the other way round, another process can append and install in between; the
    projection then covers messages this copy of the transcript lacks and would be dropped
    as invalid (the stored one is valid: it is this copy that is old).
    """
    data: Any = None
    try:
        if raw is None:
            return fresh_state(), [], False
        if isinstance(raw, SidecarError):
            raise raw
        data = json.loads(raw.decode("utf-8"))
        state = codec.decode(data)  # a newer schema raises first: it is never discarded
        reject_lone_surrogates(raw, data)
    except SidecarVersionError:
        raise
    except (SidecarError, UnicodeDecodeError, ValueError, RecursionError, TypeError, KeyError,
            AttributeError) as exc:
        # A sidecar is a cache of the transcript: whatever a decoder trips over in it is an
        # invalid sidecar, discarded and rebuilt (design §5.7), never a session that won't open.
        reason = f"unreadable or invalid: {exc}"
        store.discard_sidecar(session_id, reason)
        salvaged = _salvage(codec, data) if isinstance(data, dict) else None
        kept = ("; its readable receipt and telemetry were kept" if salvaged is not None
                else "")
        return salvaged or fresh_state(), [
            f"session {session_id!r}: sidecar discarded ({reason}){kept}; "
            "the context view was rebuilt from the transcript"
        ], True
    return (*validate_projection(state, canonical, session_id), False)


def reject_lone_surrogates(raw: bytes, data: Any) -> None:
    """:class:`SidecarError` when the sidecar ``raw`` (decoded: ``data``) holds a lone
    surrogate: text that cannot be hashed, stored or sent as UTF-8 makes it invalid."""
    if SURROGATE_ESCAPE.search(raw) and _lone_surrogate(data):
        raise SidecarError("it holds a lone surrogate (text that is not valid Unicode)")


def _lone_surrogate(data: Any) -> bool:
    """Whether decoded JSON ``data`` holds a string with a lone surrogate (``"\\ud800"``
    escaped in the file): it cannot be hashed, stored or sent as UTF-8."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, ValueError, RecursionError):
        return True
    return False


def _repaired(data: Any) -> Any:
    """``data`` with every string's surrogates repaired (keys too)."""
    if isinstance(data, str):
        return repair_surrogates(data)
    if isinstance(data, list):
        return [_repaired(v) for v in data]
    if isinstance(data, dict):
        return {_repaired(k): _repaired(v) for k, v in data.items()}
    return data


def _salvage(codec: SidecarCodec, data: dict[str, Any]) -> SidecarState | None:
    """What an invalid sidecar still holds that reads cleanly: everything but the projection
    body, or failing that the receipt and the telemetry each on their own (design §5.7: the
    projection body is dropped, readable receipts and telemetry are kept). What is kept is
    valid text: each attempt is repaired first, and a part nested too deep to walk costs
    only the attempts that hold it."""
    version = {"schema_version": data.get("schema_version", 0)}
    attempts = [
        {k: v for k, v in data.items() if k != "projection"},
        {**version, "generation": data.get("generation", 0),
         "last_receipt": data.get("last_receipt")},
        {**version, "telemetry": data.get("telemetry")},
    ]
    parts: list[SidecarState] = []
    for attempt in attempts:
        try:
            parts.append(codec.decode(_repaired(attempt)))
        except (SidecarError, ValueError, TypeError, KeyError, RecursionError):
            continue
        if attempt is attempts[0]:
            return parts[0]
    if not parts:
        return None
    receipt = next((p for p in parts if p.last_receipt is not None), None)
    telemetry = next((p.telemetry for p in parts if p.telemetry), ())
    if receipt is None and not telemetry:
        return None
    return SidecarState(
        generation=receipt.generation if receipt else 0,
        last_receipt=receipt.last_receipt if receipt else None,
        telemetry=telemetry,
    )


def _leading_system(messages: Sequence[Message]) -> int:
    n = 0
    while n < len(messages) and messages[n].role == "system":
        n += 1
    return n


def validate_projection(
    state: SidecarState, canonical: Sequence[Message], session_id: str = ""
) -> tuple[SidecarState, list[str]]:
    """Keep, repair or drop ``state.projection`` against ``canonical`` (design §5.4, §5.6).

    Valid when the body is non-empty, ``0 < covered_count <= len(canonical)`` and the stored
    ``covered_prefix_hash`` equals the hash of ``canonical[:covered_count]`` (the chain, or
    ctxfold 0.1.0's flat hash, :func:`is_0_1_flat_hash`, re-normalised to the chain) — also
    after substituting the body's own leading system messages for canonical's (a refreshed
    system prompt: the body's system messages are then refreshed from canonical and the hash
    re-normalised). A hash that equals the *promoted* form (tool ``content`` replaced by
    ``raw_content``, as earlier writers sent it) is re-normalised to the bounded hash.
    Anything else drops only the projection body.
    """
    projection = state.projection
    if projection is None:
        return state, []
    where = f"session {session_id!r}: " if session_id else ""
    count = projection.covered_count
    stored = projection.covered_prefix_hash
    body = projection.messages
    if not body or not stored or not 0 < count <= len(canonical):
        why = (
            f"covers {count} messages but the transcript has {len(canonical)}"
            if body and stored
            else "it is empty or has no covered-prefix hash"
        )
        return _drop(state, f"{where}saved projection dropped ({why}); using the full transcript")
    current = covered_prefix_hash(canonical, count)
    if stored == current:
        return state, []
    covered = list(canonical[:count])
    if is_0_1_flat_hash(stored, covered):
        new = attrs.evolve(projection, covered_prefix_hash=current)
        return attrs.evolve(state, projection=new), []
    body_sys, canon_sys = _leading_system(body), _leading_system(covered)
    candidates: list[tuple[str, Sequence[Message]]] = [("promoted", promoted(covered))]
    if tuple(body[:body_sys]) != tuple(covered[:canon_sys]):
        refreshed = [*body[:body_sys], *covered[canon_sys:]]
        candidates += [("system", refreshed), ("promoted+system", promoted(refreshed))]
    for kind, form in candidates:
        if stored == chain_hash(form) or is_0_1_flat_hash(stored, form):
            new_body = body
            if kind != "promoted":
                new_body = (*covered[:canon_sys], *body[body_sys:])
            new = attrs.evolve(projection, messages=tuple(new_body), covered_prefix_hash=current)
            what = {
                "promoted": "written when full tool output was provider-visible; hash "
                "re-normalised to the bounded form",
                "system": "system prompt refreshed from the transcript",
                "promoted+system": "promoted tool output re-normalised and system prompt "
                "refreshed",
            }[kind]
            return attrs.evolve(state, projection=new), [f"{where}saved projection kept ({what})"]
    return _drop(
        state,
        f"{where}saved projection dropped (it no longer matches the first {count} transcript "
        "messages); using the full transcript, receipts kept",
    )


def _drop(state: SidecarState, notice: str) -> tuple[SidecarState, list[str]]:
    return attrs.evolve(state, projection=None), [notice]


def dumps_state(codec: SidecarCodec, state: SidecarState) -> bytes:
    """Pretty JSON (2-space indent) + newline, as written to disk."""
    document = codec.encode(state)
    try:
        text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: escape it so the file stays valid UTF-8
        return (json.dumps(document, indent=2) + "\n").encode("ascii")


def sidecar_bytes(codec: SidecarCodec, state: SidecarState) -> bytes:
    """``state`` as the bytes of a schema-3 sidecar with a fresh ``updated_at``."""
    state = attrs.evolve(state, schema_version=SIDECAR_SCHEMA_VERSION, updated_at=utc_now())
    return dumps_state(codec, state)


def save_sidecar(store: Store, codec: SidecarCodec, session_id: str, state: SidecarState) -> None:
    """Write ``state`` as schema 3 with a fresh ``updated_at``, atomically (via the store)."""
    store.write_sidecar(session_id, sidecar_bytes(codec, state))


__all__ = [
    "dumps_state",
    "fresh_state",
    "load_sidecar",
    "read_sidecar",
    "save_sidecar",
    "session_settings",
    "sidecar_bytes",
    "sidecar_state",
    "validate_projection",
]
