"""Capability ``session:tool_result``: page through the full text of a bounded tool result.

It reads the full text of a tool result of the current session by UTF-8 byte offset. The
answer is one JSON header line ``{"result_ref","offset","next_offset","total_bytes","sha256",
"complete"}``, a newline and the page.

A page costs O(page), not O(body): what needs the whole body — its UTF-8 bytes, its SHA-256
and its ``result_ref`` — is computed once per message and kept while the message lives
(:func:`_paged`; messages are frozen, so the cache can never go stale). An ASCII body is
paged straight from the text (byte offsets are character offsets), so it is never copied.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ctxfold.capabilities.arguments import int_arg
from ctxfold.capabilities.bounding import result_ref as compute_result_ref
from ctxfold.kernel.compat import LEGACY_TOOL_RESULT_MARKERS
from ctxfold.kernel.errors import ToolResultError
from ctxfold.kernel.types import Message

#: Default and maximum page size in bytes.
PAGE_DEFAULT = 16384
PAGE_MAX = 24576

CAPABILITY_ID = "session:tool_result"
TOOL_RESULT_CAPABILITY = CAPABILITY_ID

def describe() -> dict[str, Any]:
    """This capability's entry in ``action="list"``."""
    return {
        "id": CAPABILITY_ID,
        "description": (
            "Read the full text of a tool result of this session by UTF-8 byte "
            "offset. Returns one JSON header line {result_ref, offset, next_offset, "
            "total_bytes, sha256, complete}, a newline, then the page. Continue "
            "with offset=next_offset until complete is true."
        ),
        "arguments": {
            "type": "object",
            "properties": {
                "tool_call_id": {"type": "string"},
                "result_ref": {
                    "type": "string",
                    "description": "required for truncated or duplicate results",
                },
                "offset": {"type": "integer", "minimum": 0, "default": 0},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": PAGE_MAX,
                    "default": PAGE_DEFAULT,
                },
            },
            "required": ["tool_call_id"],
        },
        "limit_default": PAGE_DEFAULT,
        "limit_max": PAGE_MAX,
    }


class _Body(NamedTuple):
    """What paging needs of one tool message, computed once (see :func:`_paged`)."""

    text: str
    data: bytes | None  # the UTF-8 bytes; None when the text is ASCII (bytes = characters)
    total: int
    sha256: str
    ref: str
    legacy: bool  # a record shortened by older code, without the full text
    shortened: bool  # the model saw a marker for it (bounded, or legacy)


_CACHE: weakref.WeakKeyDictionary[Message, _Body] = weakref.WeakKeyDictionary()
_CACHE_LOCK = threading.Lock()


def _paged(message: Message) -> _Body:
    """The body of a tool message with its size, digest and ``result_ref``: hashed once per
    message, then reused by every page (the entry goes when the message does)."""
    with _CACHE_LOCK:
        cached = _CACHE.get(message)
    if cached is not None:
        return cached
    bounded = message.raw_content is not None and message.raw_content != message.content
    text = message.raw_content if bounded and message.raw_content is not None else message.content
    data = None if text.isascii() else text.encode()
    whole = text.encode() if data is None else data  # a transient copy for hashing only
    body = _Body(
        text=text, data=data, total=len(whole), sha256=hashlib.sha256(whole).hexdigest(),
        ref=compute_result_ref(message.tool_call_id or "", whole),
        legacy=(legacy := not bounded
                and LEGACY_TOOL_RESULT_MARKERS.search(message.content) is not None),
        shortened=bounded or legacy,
    )
    del whole
    with _CACHE_LOCK:
        _CACHE[message] = body
    return body


def _select(messages: Sequence[Message], tool_call_id: str, ref: str | None) -> _Body:
    """The body of the tool message to page (newest first, design §3.2)."""
    candidates = [
        _paged(m) for m in reversed(messages) if m.role == "tool" and m.tool_call_id == tool_call_id
    ]
    if not candidates:
        known = [m.tool_call_id for m in reversed(messages) if m.role == "tool" and m.tool_call_id]
        hint = f" (newest ids: {', '.join(known[:5])})" if known else ""
        raise ToolResultError(
            f"no tool result with tool_call_id={tool_call_id!r} in this session{hint}; "
            "copy tool_call_id from the truncation marker"
        )
    if ref is not None:
        for body in candidates:
            if body.ref == ref:
                return body
        refs = ", ".join(dict.fromkeys(b.ref for b in candidates))
        raise ToolResultError(
            f"result_ref={ref!r} does not match the tool result with "
            f"tool_call_id={tool_call_id!r}; retry with result_ref={refs}"
        )
    distinct = list(dict.fromkeys(b.ref for b in candidates))
    shortened = list(dict.fromkeys(b.ref for b in candidates if b.shortened))
    if len(distinct) > 1 and len(shortened) == 1:
        # Only one of them was shortened: the one the model can have been told to page.
        return next(b for b in candidates if b.shortened)
    if len(distinct) > 1:
        raise ToolResultError(
            f"tool_call_id={tool_call_id!r} is ambiguous ({len(candidates)} results); "
            f"retry with one of result_ref={', '.join(distinct)}"
        )
    # One result for this call id: it is not ambiguous, so no result_ref is needed
    # (design §3.2: required when ambiguous), shortened or not.
    return candidates[0]


def read_tool_result(
    messages: Sequence[Message],
    *,
    tool_call_id: str,
    result_ref: str | None = None,
    offset: int = 0,
    limit: int | None = None,
) -> str:
    """One page of a tool result of ``messages`` (the current session's transcript).

    The body is ``raw_content`` for a bounded result, else ``content``. Returns the JSON
    header line ``{"result_ref","offset","next_offset","total_bytes","sha256","complete"}``
    (``sha256`` is the hex digest of the full body), ``"\\n"``, then the page: the UTF-8 bytes
    ``[offset, next_offset)``, where the end is moved back to a character start.

    Raises :class:`ToolResultError` for an unknown or ambiguous call id, a missing or wrong
    ``result_ref`` on a truncated result, a legacy truncated record without the full text, an
    offset that is negative, past the end or inside a character, and a limit outside
    ``1..PAGE_MAX`` or too small for the next character.
    """
    if not isinstance(tool_call_id, str) or not tool_call_id:
        raise ToolResultError("tool_call_id is required: pass the id from the truncation marker")
    if limit is None:
        limit = PAGE_DEFAULT
    if limit <= 0 or limit > PAGE_MAX:
        raise ToolResultError(
            f"limit={limit} is out of range for {TOOL_RESULT_CAPABILITY}; "
            f"use 1..{PAGE_MAX} bytes (default {PAGE_DEFAULT})"
        )
    body = _select(messages, tool_call_id, result_ref)
    if body.legacy:
        raise ToolResultError(
            f"tool result {tool_call_id!r}: full result is unavailable for this legacy "
            "truncated record; re-run the tool with narrower arguments"
        )
    end, page = page_bytes(body.text, body.data, body.total, offset, limit,
                           f"tool result {tool_call_id!r}")
    header = {
        "result_ref": body.ref,
        "offset": offset,
        "next_offset": end,
        "total_bytes": body.total,
        "sha256": body.sha256,
        "complete": end == body.total,
    }
    return json.dumps(header, separators=(",", ":")) + "\n" + page


def call(messages: Sequence[Message], arguments: Mapping[str, Any]) -> str:
    tool_call_id = arguments.get("tool_call_id")
    if not isinstance(tool_call_id, str) or not tool_call_id:
        raise ToolResultError(
            f"{TOOL_RESULT_CAPABILITY} needs arguments.tool_call_id (a string from the "
            "truncation marker)"
        )
    ref = arguments.get("result_ref")
    if ref is not None and not isinstance(ref, str):
        raise ToolResultError(f"argument result_ref={ref!r} must be a string like 'tr-…'")
    unknown = set(arguments) - {"tool_call_id", "result_ref", "offset", "limit"}
    if unknown:
        raise ToolResultError(
            f"unknown argument(s) {', '.join(sorted(unknown))} for {TOOL_RESULT_CAPABILITY}; "
            "allowed: tool_call_id, result_ref, offset, limit"
        )
    return read_tool_result(
        messages,
        tool_call_id=tool_call_id,
        result_ref=ref or None,
        offset=int_arg(arguments, "offset", 0) or 0,
        limit=int_arg(arguments, "limit", None),
    )


def page_bytes(
    text: str, data: bytes | None, total: int, offset: int, limit: int, what: str
) -> tuple[int, str]:
    """``(next_offset, page)``: the UTF-8 bytes ``[offset, next_offset)`` of ``text`` (whose
    bytes are ``data``, or ``None`` when it is ASCII), the end moved back to a character
    start. Raises :class:`ToolResultError` naming ``what`` for an offset outside the text or
    inside a character, and a limit too small for the next character."""
    if offset < 0 or offset > total:
        raise ToolResultError(
            f"offset={offset} is outside {what} "
            f"(total_bytes={total}); use 0..{total}"
        )
    if data is not None and offset < total and (data[offset] & 0xC0) == 0x80:
        start = offset
        while start > 0 and (data[start] & 0xC0) == 0x80:
            start -= 1
        raise ToolResultError(
            f"offset={offset} is inside a UTF-8 character of {what}; "
            f"use a character start such as {start} (or the previous page's next_offset)"
        )
    end = min(offset + limit, total)
    while data is not None and end < total and (data[end] & 0xC0) == 0x80:
        end -= 1
    if end == offset and offset < total:
        raise ToolResultError(
            "limit ends inside the next UTF-8 character; increase limit "
            f"(limit={limit}, offset={offset}, {what})"
        )
    return end, text[offset:end] if data is None else data[offset:end].decode()
