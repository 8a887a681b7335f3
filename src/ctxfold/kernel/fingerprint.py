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


def fingerprint(messages: Iterable[Message]) -> str:
    """Fingerprint of a message sequence; local-only messages are skipped."""
    h = hashlib.sha256()
    h.update(b"[")
    first = True
    for message in messages:
        if message.local_only:
            continue
        if not first:
            h.update(b",")
        first = False
        h.update(
            json.dumps(
                visible_fields(message), ensure_ascii=False, separators=(",", ":")
            ).encode("utf-8")
        )
    h.update(b"]")
    return h.digest()[:16].hex()


def covered_prefix_hash(canonical: Sequence[Message], covered_count: int) -> str:
    """Fingerprint of ``canonical[:covered_count]``; empty when the count is out of range."""
    if covered_count <= 0 or covered_count > len(canonical):
        return ""
    return fingerprint(canonical[:covered_count])


def content_hash(text: str) -> str:
    """SHA-256 (first 16 bytes, hex) of a text, e.g. a summary."""
    return hashlib.sha256(text.encode("utf-8")).digest()[:16].hex()
