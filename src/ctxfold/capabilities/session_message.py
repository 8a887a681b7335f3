"""Capability ``session:message``: read one canonical message of this session, paged.

A message is named by its reference: ``#N``, its 0-based position in the session's canonical
transcript (every message has one, folded or not, ``local_only`` included), or its ``id``
when the host gave it one. The text read is the message's *document*:

* a tool result: its full output (``raw_content`` when the result was bounded, else
  ``content``) — the same bytes ``session:tool_result`` pages;
* any other message: its text, then one line ``[tool_call ID NAME] ARGUMENTS`` per tool call.

Paging is by UTF-8 byte offset exactly like ``session:tool_result``: one JSON header line
``{"ref","id","role","offset","next_offset","total_bytes","sha256","complete"}`` (plus
``tool_call_id`` and ``result_ref`` for a tool result), a newline, then the page. Documents
are built and hashed once per message (messages are frozen; the cache goes when they do).
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ctxfold.capabilities import tool_result
from ctxfold.capabilities.arguments import int_arg
from ctxfold.kernel.errors import ToolResultError
from ctxfold.kernel.types import Message

CAPABILITY_ID = "session:message"
PAGE_DEFAULT = tool_result.PAGE_DEFAULT
PAGE_MAX = tool_result.PAGE_MAX
#: Longest reference accepted (a position or a message id).
REF_MAX = 256


class Document(NamedTuple):
    """The searchable, pageable text of one message (see the module docstring)."""

    text: str
    data: bytes | None  # UTF-8 bytes; None when the text is ASCII (bytes = characters)
    total: int
    sha256: str
    result_ref: str | None  # for a tool result: the ref session:tool_result accepts


_CACHE: weakref.WeakKeyDictionary[Message, Document] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def document(message: Message) -> Document:
    """The document of ``message``, built once per message (a tool result's is the body
    session:tool_result pages, cached there)."""
    if message.role == "tool":
        body = tool_result._paged(message)
        return Document(body.text, body.data, body.total, body.sha256, body.ref)
    with _LOCK:
        cached = _CACHE.get(message)
    if cached is not None:
        return cached
    lines = [message.text] if message.text else []
    lines += [f"[tool_call {c.id} {c.name}] {c.arguments}" for c in message.tool_calls]
    text = "\n".join(lines)
    data = None if text.isascii() else text.encode()
    whole = text.encode() if data is None else data
    doc = Document(text, data, len(whole), hashlib.sha256(whole).hexdigest(), None)
    with _LOCK:
        _CACHE[message] = doc
    return doc


def ref_of(index: int) -> str:
    return f"#{index}"


def resolve(messages: Sequence[Message], ref: Any, what: str = "ref") -> int:
    """The canonical position named by ``ref`` (``#N`` or a message id)."""
    if not isinstance(ref, str) or not ref.strip() or len(ref) > REF_MAX:
        raise ToolResultError(
            f"argument {what} must be a message reference: \"#N\" (a position in this "
            "session, as session:search returns it) or a message id"
        )
    ref = ref.strip()
    digits = ref[1:] if ref.startswith("#") else ""
    if digits.isascii() and digits.isdigit() and len(digits) <= 19:
        index = int(digits)
        if index >= len(messages):
            raise ToolResultError(
                f"{what}={ref!r} is past the end of this session (positions #0..#"
                f"{len(messages) - 1})" if messages else f"{what}={ref!r}: this session is empty"
            )
        return index
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].id == ref:
            return index
    raise ToolResultError(
        f"no message {ref!r} in this session; use \"#N\" positions or ids from session:search"
    )


def describe() -> dict[str, Any]:
    """This capability's entry in ``action="list"``."""
    return {
        "id": CAPABILITY_ID,
        "description": (
            "Read one message of this session's full history (folded or not) by its ref "
            "(\"#N\" position or message id, from session:search or a summary's lookup "
            "line), paged by UTF-8 byte offset. A tool result reads as its full output. "
            "Returns one JSON header line {ref, id, role, offset, next_offset, total_bytes, "
            "sha256, complete}, a newline, then the page. Continue with offset=next_offset "
            "until complete is true."
        ),
        "arguments": {
            "type": "object",
            "properties": {
                "ref": {"type": "string", "description": "\"#N\" or a message id"},
                "offset": {"type": "integer", "minimum": 0, "default": 0},
                "limit": {"type": "integer", "minimum": 1, "maximum": PAGE_MAX,
                          "default": PAGE_DEFAULT},
            },
            "required": ["ref"],
        },
        "limit_default": PAGE_DEFAULT,
        "limit_max": PAGE_MAX,
    }


def call(messages: Sequence[Message], arguments: Mapping[str, Any]) -> str:
    unknown = set(arguments) - {"ref", "offset", "limit"}
    if unknown:
        raise ToolResultError(
            f"unknown argument(s) {', '.join(sorted(map(str, unknown)))[:200]} for "
            f"{CAPABILITY_ID}; allowed: ref, offset, limit"
        )
    if "ref" not in arguments:
        raise ToolResultError(f"{CAPABILITY_ID} needs arguments.ref (\"#N\" or a message id)")
    index = resolve(messages, arguments["ref"])
    offset = int_arg(arguments, "offset", 0) or 0
    limit = int_arg(arguments, "limit", PAGE_DEFAULT)
    if limit is None or limit <= 0 or limit > PAGE_MAX:
        raise ToolResultError(
            f"limit={limit} is out of range for {CAPABILITY_ID}; use 1..{PAGE_MAX} bytes "
            f"(default {PAGE_DEFAULT})"
        )
    message = messages[index]
    doc = document(message)
    end, page = tool_result.page_bytes(doc.text, doc.data, doc.total, offset, limit,
                                       f"message {ref_of(index)}")
    header: dict[str, Any] = {"ref": ref_of(index), "id": message.id, "role": message.role}
    if message.role == "tool":
        header.update(tool_call_id=message.tool_call_id, result_ref=doc.result_ref)
    header.update(offset=offset, next_offset=end, total_bytes=doc.total, sha256=doc.sha256,
                  complete=end == doc.total)
    return json.dumps(header, ensure_ascii=False, separators=(",", ":")) + "\n" + page
