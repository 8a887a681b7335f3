"""Checking a message before it is appended, and repairing text read back.

:func:`check_message` applies the rules transcript loading applies (strict field types, JSON
wire fields, text that encodes as UTF-8), so nothing enters a transcript that the session could
not read back; :func:`repaired_message` is how text written before lone surrogates were refused
is read (joined pairs, U+FFFD for a lone half), never a crash.
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

from ctxfold.kernel.errors import MessageError
from ctxfold.kernel.types import Message, ToolCall

_OPTIONAL_TEXT = ("raw_content", "tool_call_id", "name", "reasoning_content")


def check_message(message: Message, *, where: str = "message") -> Message:
    """Check field types the way transcript loading will (strict), so nothing is appended
    that the session could not read back. Raises :class:`MessageError` naming the field."""
    if message.role not in ("system", "user", "assistant", "tool"):
        raise MessageError(f"{where}: role {message.role!r} is not system/user/assistant/tool")
    if not isinstance(message.content, str):
        raise MessageError(f"{where}: content must be a string, got "
                           f"{type(message.content).__name__}")
    for field in _OPTIONAL_TEXT:
        value = getattr(message, field)
        if value is not None and not isinstance(value, str):
            raise MessageError(f"{where}: {field} must be a string or absent, got "
                               f"{type(value).__name__} {value!r:.40}")
    for field in ("local_only", "partial"):
        if not isinstance(getattr(message, field), bool):
            raise MessageError(f"{where}: {field} must be true or false")
    if message.origin not in ("user", "host"):
        raise MessageError(f"{where}: origin {message.origin!r} is not user/host")
    if not isinstance(message.created_at, str) or not isinstance(message.id, str):
        raise MessageError(f"{where}: created_at and id must be strings")
    for i, call in enumerate(message.tool_calls):
        if not isinstance(call, ToolCall) or not all(
            isinstance(v, str) for v in (call.id, call.name, call.arguments)
        ):
            raise MessageError(f"{where}: tool_calls[{i}] needs string id, name and arguments")
    _check_wire_fields(message, where)
    _check_text(message, where)
    return message


def check_stored(message: Message, *, where: str = "message") -> Message:
    """The checks of :func:`check_message` a message read back from a store needs before
    anything uses it (the cheap ones: role, origin, and the JSON of its wire fields — a part
    that is not JSON would otherwise raise ``JSONDecodeError`` from ``message.text``)."""
    if message.role not in ("system", "user", "assistant", "tool"):
        raise MessageError(f"{where}: role {message.role!r} is not system/user/assistant/tool")
    if message.origin not in ("user", "host"):
        raise MessageError(f"{where}: origin {message.origin!r} is not user/host")
    if message.parts or message.responses_items or message.anthropic_blocks or message.extra \
            or message.wire_role or message.content_form:
        _check_wire_fields(message, where)
    return message


def _check_wire_fields(message: Message, where: str) -> None:
    if not isinstance(message.parts, tuple):
        raise MessageError(f"{where}: parts must be a tuple of JSON strings")
    if message.parts and message.content:
        raise MessageError(f"{where}: a message has either content or parts, not both")
    for i, raw in enumerate(message.parts):
        part = _json_object(raw, f"{where}: parts[{i}]")
        if not isinstance(part.get("type"), str):
            raise MessageError(f"{where}: parts[{i}] needs a string 'type'")
    if message.extra:
        _json_object(message.extra, f"{where}: extra")
    if not isinstance(message.responses_items, tuple):
        raise MessageError(f"{where}: responses_items must be a tuple of JSON strings")
    for i, raw in enumerate(message.responses_items):
        item = _json_object(raw, f"{where}: responses_items[{i}]")
        if not isinstance(item.get("type"), str):
            raise MessageError(f"{where}: responses_items[{i}] needs a string 'type'")
    if not isinstance(message.anthropic_blocks, tuple):
        raise MessageError(f"{where}: anthropic_blocks must be a tuple of JSON strings")
    for i, raw in enumerate(message.anthropic_blocks):
        block = _json_object(raw, f"{where}: anthropic_blocks[{i}]")
        # The first entry may be the Anthropic message itself (a "role", no "type").
        if not isinstance(block.get("type"), str) and not (i == 0 and "role" in block):
            raise MessageError(f"{where}: anthropic_blocks[{i}] needs a string 'type'")
    if message.wire_role not in ("", "developer"):
        raise MessageError(f"{where}: wire_role {message.wire_role!r} is not '' or 'developer'")
    if message.content_form not in ("", "null", "absent"):
        raise MessageError(f"{where}: content_form {message.content_form!r} is not '', "
                           "'null' or 'absent'")


def _json_object(raw: object, where: str) -> dict[str, Any]:
    if not isinstance(raw, str):
        raise MessageError(f"{where} must be a JSON string, got {type(raw).__name__}")
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise MessageError(f"{where} is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise MessageError(f"{where} must be a JSON object, got {type(value).__name__}")
    return value


def _check_text(message: Message, where: str) -> None:
    """Every text must encode as UTF-8: a lone surrogate (``"\\ud800"``) is refused here,
    before it could reach a transcript line, a fingerprint or a request."""
    texts: list[tuple[str, str | None]] = [
        (field, getattr(message, field))
        for field in ("content", "raw_content", "tool_call_id", "name", "reasoning_content",
                      "extra", "created_at", "id")
    ]
    texts += [(f"parts[{i}]", raw) for i, raw in enumerate(message.parts)]
    texts += [(f"responses_items[{i}]", raw) for i, raw in enumerate(message.responses_items)]
    texts += [(f"anthropic_blocks[{i}]", raw)
              for i, raw in enumerate(message.anthropic_blocks)]
    for i, call in enumerate(message.tool_calls):
        texts += [(f"tool_calls[{i}].{f}", getattr(call, f)) for f in ("id", "name", "arguments")]
    for field, value in texts:
        if value is None:
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise MessageError(
                f"{where}: {field} is not valid text: {exc.reason} at character {exc.start} "
                f"({value[exc.start:exc.end]!r}); lone surrogates cannot be stored or sent — "
                "decode the source with errors='replace' or join the surrogate pair"
            ) from None


_SURROGATE = re.compile("[\ud800-\udfff]")
#: A JSON escape of a surrogate code point (the only way one gets into a UTF-8 file).
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def repair_surrogates(text: str) -> str:
    """``text`` with surrogate halves joined into their code point (a provider's escaped
    emoji split across two stream chunks arrives as two lone halves) and any half that has no
    partner replaced by U+FFFD. Text without surrogates is returned as it is."""
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def repaired_message(message: Message) -> Message:
    """``message`` with :func:`repair_surrogates` applied to every text (how a stored
    transcript written before lone surrogates were refused is read: never a crash, and the
    file is not rewritten)."""
    fields: dict[str, Any] = {}
    for name in ("content", "raw_content", "tool_call_id", "name", "reasoning_content",
                 "extra", "created_at", "id"):
        value = getattr(message, name)
        if isinstance(value, str) and _SURROGATE.search(value):
            fields[name] = repair_surrogates(value)
    for name in ("parts", "responses_items", "anthropic_blocks"):
        values = getattr(message, name)
        if any(_SURROGATE.search(v) for v in values):
            fields[name] = tuple(repair_surrogates(v) for v in values)
    if any(_SURROGATE.search(c.id + c.name + c.arguments) for c in message.tool_calls):
        fields["tool_calls"] = tuple(
            ToolCall(id=repair_surrogates(c.id), name=repair_surrogates(c.name),
                     arguments=repair_surrogates(c.arguments)) for c in message.tool_calls)
    return attrs.evolve(message, **fields) if fields else message
