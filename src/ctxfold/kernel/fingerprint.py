"""Provider-visible fingerprints (design §5.3).

A fingerprint is SHA-256 over a compact canonical JSON of the provider-visible fields of
each message (role, content, reasoning, tool call id, name, tool calls, and content parts,
unnamed fields and role alias when present), hex of the first 16 bytes. ``raw_content`` and
the local fields (origin, local_only, partial, created_at, id) never participate, and
``local_only`` messages are skipped because they are never sent.

The covered-prefix hash of a projection is a chain over those fingerprints
(:func:`chain_hash`), so it extends from the hash alone; sidecars of ctxfold 0.1.0 hold the
flat :func:`fingerprint` of the prefix instead (read in one place,
``kernel.compat.is_0_1_flat_hash``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from ctxfold.kernel.types import Message


def visible_fields(message: Message) -> dict[str, Any]:
    """The compact wire form of one message's provider-visible fields."""
    wire: dict[str, Any] = {"r": message.role, "c": message.content}
    if message.reasoning_content:
        wire["rc"] = message.reasoning_content
    if message.tool_call_id:
        wire["tid"] = message.tool_call_id
    if message.name:
        wire["n"] = message.name
    if message.tool_calls:
        wire["tc"] = [[c.id, c.name, c.arguments] for c in message.tool_calls]
    # Content given as parts, unnamed fields and aliases are provider-visible too (absent
    # from a plain text message, so its fingerprint is what it always was).
    if message.parts:
        wire["p"] = list(message.parts)
    if message.extra:
        wire["x"] = message.extra
    if message.wire_role:
        wire["wr"] = message.wire_role
    if message.content_form:
        wire["cf"] = message.content_form
    if message.responses_items:
        wire["ri"] = list(message.responses_items)
    if message.anthropic_blocks:
        wire["ab"] = list(message.anthropic_blocks)
    return wire


#: One compact encoder for every fingerprint (``json.dumps`` would build one per call).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_CHUNK = 512


def _digest(message: Message) -> bytes:
    """The 16 fingerprint bytes of one message that is not ``local_only``."""
    wire = _ENCODER.encode(visible_fields(message)).encode("utf-8")
    return hashlib.sha256(b"[" + wire + b"]").digest()[:16]


def message_fingerprint(message: Message) -> str:
    """Fingerprint of one message (the per-message estimator cache key)."""
    return fingerprint([message]) if message.local_only else _digest(message).hex()


def _extend(h: Any, messages: Iterable[Message], first: bool) -> bool:
    """Feed ``messages`` to the running SHA-256 ``h`` — the bytes of their comma-joined
    compact JSON, encoded a chunk at a time — and return whether none has been fed yet."""
    chunk: list[dict[str, Any]] = []

    def feed(first: bool) -> bool:
        text = _ENCODER.encode(chunk)[1:-1]  # "[a,b]" → "a,b"
        h.update((text if first else "," + text).encode("utf-8"))
        chunk.clear()
        return False

    for message in messages:
        if not message.local_only:
            chunk.append(visible_fields(message))
            if len(chunk) == _CHUNK:
                first = feed(first)
    return feed(first) if chunk else first


def fingerprint(messages: Iterable[Message]) -> str:
    """Fingerprint of a message sequence; local-only messages are skipped."""
    h = hashlib.sha256(b"[")
    _extend(h, messages, True)
    h.update(b"]")
    return h.digest()[:16].hex()


#: The value a covered-prefix hash chain starts from (so no prefix hashes to "").
_CHAIN_SEED = hashlib.sha256(b"ctxfold covered prefix v2").digest()[:16]

#: Prefixes hashed before: (the sequence itself, count, its last message, the hash). A
#: transcript only grows by appends (a rewind or re-read gives a new sequence), so a prefix
#: of the same sequence ending in the same message object has the same hash. The sequence
#: is held, not its ``id``, whose address a new list may reuse at once.
_PREFIXES: list[tuple[Sequence[Message], int, Message, str]] = []
_PREFIX_LOCK = threading.Lock()
_PREFIX_SLOTS = 16


def chain_hash(messages: Iterable[Message], start: str = "") -> str:
    """The covered-prefix hash of ``start``'s prefix then ``messages``: a chain ``h =
    SHA-256(h || fingerprint(m))[:16]`` over the messages not ``local_only``, from a fixed
    seed (``start`` empty) — so it extends across processes from the hash alone."""
    h = bytes.fromhex(start) if start else _CHAIN_SEED
    for message in messages:
        if not message.local_only:
            h = hashlib.sha256(h + _digest(message)).digest()[:16]
    return h.hex()


def remember_prefix(canonical: Sequence[Message], count: int, digest: str) -> None:
    """Record that ``canonical[:count]`` hashes to ``digest``, for extending it later."""
    if 0 < count <= len(canonical) and digest:
        entry = (canonical, count, canonical[count - 1], digest)
        with _PREFIX_LOCK:
            _PREFIXES[:] = [e for e in _PREFIXES if e[0] is not canonical][-_PREFIX_SLOTS + 1:]
            _PREFIXES.append(entry)


def covered_prefix_hash(canonical: Sequence[Message], covered_count: int) -> str:
    """:func:`chain_hash` of ``canonical[:covered_count]`` ("" when out of range), extending
    the longest prefix of the same sequence hashed before or vouched for by its store
    (``vouched``: ``ctxfold.engine.transcript``) — an install hashes only new messages."""
    if covered_count <= 0 or covered_count > len(canonical):
        return ""
    start, digest = 0, ""
    vouched = getattr(canonical, "vouched", None)
    if vouched:
        for count, known in vouched.items():
            if start < count <= covered_count:
                start, digest = count, known
    with _PREFIX_LOCK:
        for key, count, last, known in _PREFIXES:
            if (key is canonical and start < count <= covered_count
                    and canonical[count - 1] is last):
                start, digest = count, known
    if start == covered_count:
        return digest
    digest = chain_hash(canonical[start:covered_count], digest)
    remember_prefix(canonical, covered_count, digest)
    return digest


def content_hash(text: str) -> str:
    """SHA-256 (first 16 bytes, hex) of a text, e.g. a summary."""
    return hashlib.sha256(text.encode("utf-8")).digest()[:16].hex()
