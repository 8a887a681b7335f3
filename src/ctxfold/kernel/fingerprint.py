"""Provider-visible fingerprints (SPEC §3.5).

A fingerprint is SHA-256 over a compact canonical JSON of the provider-visible fields of
each message (role, content, reasoning, tool call id, name, tool calls, and content parts,
unnamed fields and role alias when present), hex of the first 16 bytes. ``raw_content`` and
the local fields (origin, local_only, partial, created_at, id) never participate, and
``local_only`` messages are skipped because they are never sent.
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
    return wire


def message_fingerprint(message: Message) -> str:
    """Fingerprint of one message (the per-message estimator cache key)."""
    return fingerprint([message])


#: One compact encoder for every fingerprint (``json.dumps`` would build one per call).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_CHUNK = 512


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


#: Running hashes of prefixes seen before: (the list itself, count, its last message, whether
#: it was empty, the SHA-256 state before the closing bracket). A transcript only grows by
#: appends (a rewind or re-read gives a new list), so a prefix of the same list ending in the
#: same message object has the same bytes. The list is held, not its ``id``: a freed list's
#: address is reused at once, and a new list there may end in the same message object.
_PREFIXES: list[tuple[Sequence[Message], int, Message, bool, Any]] = []
_PREFIX_LOCK = threading.Lock()
_PREFIX_SLOTS = 16


def covered_prefix_hash(canonical: Sequence[Message], covered_count: int) -> str:
    """Fingerprint of ``canonical[:covered_count]``; empty when the count is out of range.

    Incremental: the hash state of the longest prefix of the same list seen before is
    extended by the messages after it, so an install (or the validation at open followed
    by installs) hashes each covered message once, not the whole covered transcript again.
    """
    if covered_count <= 0 or covered_count > len(canonical):
        return ""
    start, first, h = 0, True, None
    with _PREFIX_LOCK:
        for key, count, last, empty, state in _PREFIXES:
            if (key is canonical and start < count <= covered_count
                    and canonical[count - 1] is last):
                start, first, h = count, empty, state
        h = h.copy() if h is not None else hashlib.sha256(b"[")
    first = _extend(h, canonical[start:covered_count], first)
    entry = (canonical, covered_count, canonical[covered_count - 1], first, h.copy())
    with _PREFIX_LOCK:
        _PREFIXES[:] = [e for e in _PREFIXES if e[0] is not canonical][-_PREFIX_SLOTS + 1:]
        _PREFIXES.append(entry)
    h.update(b"]")
    return h.digest()[:16].hex()


def content_hash(text: str) -> str:
    """SHA-256 (first 16 bytes, hex) of a text, e.g. a summary."""
    return hashlib.sha256(text.encode("utf-8")).digest()[:16].hex()
