"""Bounding tool results at creation (design §3.1).

A tool result's provider-visible ``content`` is fixed when the result is created and is at
most :data:`TOOL_CONTENT_BOUND` bytes of UTF-8. Larger results keep a head and a tail chosen
by tool class, joined by a recovery marker that names the tool, the call id, the
``result_ref`` of the full body and the byte counts, and tells the model how to page through
the full text with ``use_capability`` (see :mod:`ctxfold.capabilities.tool`). The complete
text is kept locally in ``Message.raw_content``, which is never sent and never fingerprinted.

Because ``content`` never changes after creation, every later request repeats the same bytes
and stays a prompt-cache hit (design §3.1, §5.6).
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from typing import Any

import attrs

from ctxfold.kernel.types import Message, utc_now

#: Maximum UTF-8 bytes of a tool result's provider-visible content.
TOOL_CONTENT_BOUND = 32768

#: Bytes reserved for the recovery marker when head and tail are planned.
MARKER_RESERVE = 512
#: Longest tool name / call id (UTF-8 bytes) quoted in a marker.
MARKER_FIELD_MAX = 128
#: Contiguous-prefix tools keep about ``bound - PREFIX_RESERVE`` bytes.
PREFIX_RESERVE = 1024

#: Tools whose output is a file: keep a contiguous prefix so reading can resume exactly.
PREFIX_TOOLS = frozenset({"read_file", "read"})
#: (head chars, tail chars) by tool class; names are compared case-insensitively.
_CLASS_BUDGETS: tuple[tuple[frozenset[str], tuple[int, int]], ...] = (
    (frozenset({"bash", "shell", "sh", "exec", "run_command", "execute_command", "terminal"}),
     (8000, 8000)),
    # "read" is a file read here (PREFIX_TOOLS, design §3.1), not a shell command.
    (frozenset({"web_fetch", "webfetch", "fetch", "read_url"}), (12000, 2000)),
    (frozenset({"grep", "glob", "ls", "find", "search", "rg", "list_dir"}), (10000, 1000)),
)
DEFAULT_BUDGET = (12000, 4000)

_ERROR_WORDS = (b"error:", b"panic:", b"fatal:")
_SURROGATES = re.compile("[\ud800-\udfff]")
_UNSAFE_FIELD = re.compile(r"[\s\]\[]")
# Combining marks, ZWJ, variation selectors, emoji modifiers and tag characters extend the
# previous character; a cut right before one would leave a dangling mark in the tail.
_GRAPHEME_STEPS = 16


def result_ref(call_id: str, full_body: str | bytes) -> str:
    """``"tr-"`` + hex of the first 12 bytes of SHA-256(call_id ‖ 0x00 ‖ full_body); the body
    may be given as its UTF-8 bytes (hashed in place, never concatenated)."""
    digest = hashlib.sha256(call_id.encode() + b"\0")
    digest.update(full_body if isinstance(full_body, bytes) else full_body.encode())
    return "tr-" + digest.digest()[:12].hex()


def as_text(text: str | bytes) -> str:
    """Text that always encodes as UTF-8: ``bytes`` (raw tool output that may not be valid
    UTF-8) are decoded with ``errors="replace"`` (every invalid sequence becomes U+FFFD) and
    lone surrogates in a ``str`` become U+FFFD (ASCII, the common case, costs nothing)."""
    if isinstance(text, bytes):
        return text.decode("utf-8", errors="replace")
    return text if text.isascii() else _SURROGATES.sub("\ufffd", text)


def _is_continuation(data: bytes, index: int) -> bool:
    return 0 <= index < len(data) and (data[index] & 0xC0) == 0x80


def snap_back(data: bytes, index: int) -> int:
    """The largest character start ≤ ``index`` (``len(data)`` counts as a start)."""
    index = max(0, min(index, len(data)))
    while index > 0 and _is_continuation(data, index):
        index -= 1
    return index


def snap_forward(data: bytes, index: int) -> int:
    """The smallest character start ≥ ``index``."""
    index = max(0, min(index, len(data)))
    while _is_continuation(data, index):
        index += 1
    return index


def _extends(ch: str) -> bool:
    code = ord(ch)
    return (
        unicodedata.combining(ch) != 0
        or code == 0x200D
        or 0xFE00 <= code <= 0xFE0F
        or 0x1F3FB <= code <= 0x1F3FF
        or 0xE0020 <= code <= 0xE007F
    )


def _clip_field(value: str) -> str:
    """``value`` without whitespace/brackets, at most MARKER_FIELD_MAX bytes."""
    clean = _UNSAFE_FIELD.sub("_", value) or "_"
    return _clip_bytes(clean, MARKER_FIELD_MAX)


def _clip_bytes(value: str, limit: int) -> str:
    data = value.encode()
    return data[: snap_back(data, limit)].decode()


def _budget(tool_name: str) -> tuple[int, int]:
    key = tool_name.lower()
    for names, budget in _CLASS_BUDGETS:
        if key in names:
            return budget
    return DEFAULT_BUDGET


def _marker(
    *, incomplete: bool, tool: str, call_id: str, ref: str, original: int, kept: int, offset: int
) -> str:
    arguments = json.dumps(
        {"tool_call_id": _clip_bytes(call_id, MARKER_FIELD_MAX), "result_ref": ref,
         "offset": offset},
        ensure_ascii=False,
    )
    head = "INCOMPLETE READ" if incomplete else "truncated"
    where = (
        f"next_offset={offset} — only the first {kept} bytes are shown"
        if incomplete
        else f"omitted_bytes={original - kept} starting at byte offset {offset}"
    )
    return (
        f"\n…[{head} tool={_clip_field(tool)} call_id={_clip_field(call_id)} "
        f"result_ref={ref} original_bytes={original} kept_bytes={kept} {where}; "
        "full original retained locally; recover with use_capability(action=\"call\", "
        f"capability_id=\"session:tool_result\", arguments={arguments}). "
        "If use_capability is unavailable, re-run the original tool with narrower arguments]…\n"
    )


def _bound_prefix(data: bytes, *, tool: str, call_id: str, ref: str, cap: int) -> str:
    """Contiguous prefix cut back to a newline, then the marker (design §3.1, read_file)."""
    budget = cap - PREFIX_RESERVE
    for _ in range(3):
        end = snap_back(data, budget)
        newline = data.rfind(b"\n", 0, end)
        end = newline + 1 if newline + 1 >= PREFIX_RESERVE else _grapheme_back(data, end)
        marker = _marker(incomplete=True, tool=tool, call_id=call_id, ref=ref,
                         original=len(data), kept=end, offset=end)
        excess = end + len(marker.encode()) - cap
        if excess <= 0:
            return data[:end].decode() + marker
        # The marker only shrinks with the prefix, so the second pass always fits.
        budget = end - excess
    raise AssertionError("bound_tool_content: marker does not fit the cap")  # pragma: no cover


def _char_at(data: bytes, index: int) -> str:
    return data[index : snap_forward(data, index + 1)].decode()


def _grapheme_back(data: bytes, end: int) -> int:
    """Move a cut at ``end`` back so a base character keeps its combining marks."""
    for _ in range(_GRAPHEME_STEPS):
        if not 0 < end < len(data) or not _extends(_char_at(data, end)):
            break
        end = snap_back(data, end - 1)
    return end


def _grapheme_forward(data: bytes, start: int) -> int:
    """Move a tail start forward past marks that belong to an omitted character."""
    for _ in range(_GRAPHEME_STEPS):
        if start >= len(data) or not _extends(_char_at(data, start)):
            break
        start = snap_forward(data, start + 1)
    return start


def _cut(data: bytes, head_bytes: int, tail_bytes: int) -> tuple[str, str]:
    """Head and tail at character (and, within a few steps, grapheme) boundaries."""
    head_end = _grapheme_back(data, snap_back(data, head_bytes))
    tail_start = _grapheme_forward(data, snap_forward(data, len(data) - tail_bytes))
    return data[:head_end].decode(), data[tail_start:].decode()


def bound_tool_content(text: str | bytes, *, tool_name: str, call_id: str) -> str:
    """The provider-visible content of a tool result: at most 32768 UTF-8 bytes.

    Text within the bound is returned unchanged. Larger text becomes head + recovery marker
    + tail by tool class (design §3.1): ``read_file``/``read`` keep a contiguous prefix cut
    back to the last newline and the marker gives ``next_offset``; ``bash``/``shell`` keep
    8000/8000 characters, ``web_fetch`` 12000/2000, ``grep``/``glob``/``ls`` 10000/1000,
    anything else 12000/4000. If head + tail exceed ``cap - 512`` bytes the head gets 2/3 of
    the cap; text containing ``error:``/``panic:``/``fatal:`` keeps a tail of at least
    ``cap // 3`` bytes. Up to three passes shrink the head (then the tail) until head +
    marker + tail fit. Cuts fall on character boundaries, never inside a UTF-8 sequence.
    ``bytes`` input is decoded with ``errors="replace"`` (see :func:`as_text`).
    """
    cap = TOOL_CONTENT_BOUND
    text = as_text(text)
    data = text.encode()
    if len(data) <= cap:
        return text
    ref = result_ref(call_id, data)
    if tool_name.lower() in PREFIX_TOOLS:
        return _bound_prefix(data, tool=tool_name, call_id=call_id, ref=ref, cap=cap)

    head_chars, tail_chars = _budget(tool_name)
    head_bytes = len(text[:head_chars].encode())
    tail_bytes = len(text[-tail_chars:].encode())
    room = cap - MARKER_RESERVE
    if head_bytes + tail_bytes > room:
        head_bytes = 2 * cap // 3
        tail_bytes = min(tail_bytes, room - head_bytes)
    lowered = data.lower()  # bytes: no non-ASCII character lowers to these ASCII words
    if any(word in lowered for word in _ERROR_WORDS):
        # The end of a failing command's output is where the cause is.
        tail_bytes = max(tail_bytes, cap // 3)
        head_bytes = min(head_bytes, room - tail_bytes)

    for _ in range(4):  # the first pass plus up to three shrink passes (design §3.1)
        head, tail = _cut(data, head_bytes, tail_bytes)
        kept_head, kept_tail = len(head.encode()), len(tail.encode())
        marker = _marker(incomplete=False, tool=tool_name, call_id=call_id, ref=ref,
                         original=len(data), kept=kept_head + kept_tail, offset=kept_head)
        excess = kept_head + len(marker.encode()) + kept_tail - cap
        if excess <= 0:
            return head + marker + tail
        # Shrink the head first: the tail holds the outcome (exit status, errors). The
        # marker only shrinks with head and tail, so the second pass always fits.
        from_head = min(excess, kept_head)
        head_bytes = kept_head - from_head
        tail_bytes = max(0, kept_tail - (excess - from_head))
    raise AssertionError("bound_tool_content: marker does not fit the cap")  # pragma: no cover


_RESERVED_FIELDS = frozenset({"role", "content", "raw_content", "tool_call_id", "name"})


def make_tool_result(
    call_id: str, text: str | bytes, *, tool_name: str, **fields: Any
) -> Message:
    """A ``role="tool"`` message whose ``content`` is bounded at creation.

    ``raw_content`` holds the full text only when it was bounded (``None`` otherwise).
    ``bytes`` input is decoded with ``errors="replace"``. ``fields`` sets other
    :class:`Message` fields (``created_at`` defaults to now, ``id``, ``origin``, ...).
    """
    clash = _RESERVED_FIELDS.intersection(fields)
    if clash:
        raise TypeError(
            f"make_tool_result() sets {', '.join(sorted(clash))} itself; "
            "pass call_id, text and tool_name instead"
        )
    full = as_text(text)
    content = bound_tool_content(full, tool_name=tool_name, call_id=call_id)
    fields.setdefault("created_at", utc_now())
    return Message(
        role="tool",
        content=content,
        raw_content=full if content != full else None,
        name=tool_name,
        tool_call_id=call_id,
        **fields,
    )


def bound_new_message(message: Message) -> Message:
    """``message`` as it enters the transcript: stamped with ``created_at`` when it has none,
    and, for a tool result, bounded at creation (design §3.1) with the full text kept locally
    (a tool message arriving with ``raw_content`` set is bounded from that full text)."""
    if not message.created_at:
        message = attrs.evolve(message, created_at=utc_now())
    if message.role != "tool" or (
        len(message.content) * 4 <= TOOL_CONTENT_BOUND
        or len(message.content.encode()) <= TOOL_CONTENT_BOUND
    ):
        return message
    full = message.raw_content if message.raw_content is not None else message.content
    content = bound_tool_content(
        full, tool_name=message.name or "tool", call_id=message.tool_call_id or ""
    )
    return attrs.evolve(message, content=content, raw_content=full)
