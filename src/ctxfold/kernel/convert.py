"""All (un)structuring of ctxfold's value objects, in one place.

* :data:`converter` turns value objects into JSON-ready dicts and back (transcript lines,
  sidecar bodies). Fields equal to their default are omitted on the way out, so files stay
  small and adding a field later does not change existing bytes.
* :func:`message_from_openai` / :func:`message_to_openai` translate OpenAI chat-format
  message dicts, losslessly for the fields ctxfold knows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from ctxfold.kernel.errors import CtxfoldError
from ctxfold.kernel.types import (
    CacheState,
    Message,
    Projection,
    Receipt,
    ReceiptAction,
    ReceiptStatus,
    Role,
    SidecarState,
    TelemetryRecord,
    ToolCall,
    ToolSchema,
    Usage,
)


def _strict(kind: type) -> Any:
    def structure(value: Any, _type: Any) -> Any:
        if type(value) is not kind and not (kind is int and type(value) is int):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__} {value!r:.40}")
        return value

    return structure


def _strict_number(value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {type(value).__name__} {value!r:.40}")
    return value


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=False)
    # Strict primitives: a transcript line with "local_only": "no" is corrupt, not True.
    conv.register_structure_hook(str, _strict(str))
    conv.register_structure_hook(bool, _strict(bool))
    conv.register_structure_hook(int, _strict(int))
    conv.register_structure_hook(float, lambda v, _t: float(_strict_number(v)))
    for cls in (
        Message,
        ToolCall,
        Usage,
        Projection,
        Receipt,
        TelemetryRecord,
        SidecarState,
        ToolSchema,
    ):
        conv.register_unstructure_hook(
            cls, make_dict_unstructure_fn(cls, conv, _cattrs_omit_if_default=True)
        )
        conv.register_structure_hook(cls, make_dict_structure_fn(cls, conv))
    conv.register_structure_hook(CacheState, lambda v, _t: CacheState.coerce(v))
    conv.register_structure_hook(ReceiptStatus, lambda v, _t: ReceiptStatus(v))
    conv.register_structure_hook(ReceiptAction, lambda v, _t: ReceiptAction(v))
    return conv


#: The converter for every ctxfold value object.
converter = _make_converter()


_OPTIONAL_TEXT = ("raw_content", "tool_call_id", "name", "reasoning_content")


def check_message(message: Message, *, where: str = "message") -> Message:
    """Check field types the way transcript loading will (strict), so nothing is appended
    that the session could not read back. Raises :class:`InteropError` naming the field."""
    if message.role not in ("system", "user", "assistant", "tool"):
        raise InteropError(f"{where}: role {message.role!r} is not system/user/assistant/tool")
    if not isinstance(message.content, str):
        raise InteropError(f"{where}: content must be a string, got "
                           f"{type(message.content).__name__}")
    for field in _OPTIONAL_TEXT:
        value = getattr(message, field)
        if value is not None and not isinstance(value, str):
            raise InteropError(f"{where}: {field} must be a string or absent, got "
                               f"{type(value).__name__} {value!r:.40}")
    for field in ("local_only", "partial"):
        if not isinstance(getattr(message, field), bool):
            raise InteropError(f"{where}: {field} must be true or false")
    if message.origin not in ("user", "host"):
        raise InteropError(f"{where}: origin {message.origin!r} is not user/host")
    if not isinstance(message.created_at, str) or not isinstance(message.id, str):
        raise InteropError(f"{where}: created_at and id must be strings")
    for i, call in enumerate(message.tool_calls):
        if not isinstance(call, ToolCall) or not all(
            isinstance(v, str) for v in (call.id, call.name, call.arguments)
        ):
            raise InteropError(f"{where}: tool_calls[{i}] needs string id, name and arguments")
    return message


def message_to_dict(message: Message) -> dict[str, Any]:
    """Unstructure a message for a transcript line (defaults omitted)."""
    data: dict[str, Any] = converter.unstructure(message)
    return data


def message_from_dict(data: Mapping[str, Any]) -> Message:
    """Structure a transcript line into a message; raises ``cattrs`` errors on bad data."""
    return converter.structure(dict(data), Message)


def dumps_message(message: Message) -> str:
    """One compact JSON line (no newline) for ``message``; non-ASCII kept as UTF-8."""
    return json.dumps(message_to_dict(message), ensure_ascii=False, separators=(",", ":"))


# -- OpenAI chat-format interop ----------------------------------------------------------------


class InteropError(CtxfoldError):
    """An OpenAI-style message dict could not be understood."""


def join_text_parts(parts: list[Any]) -> str:
    """Join the text of OpenAI content parts (strings or ``{"text": ...}``); others skipped."""
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "\n".join(texts)


def _text_of(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return join_text_parts(content)
    raise InteropError(f"{where}: content must be a string or a list of text parts")


def message_from_openai(data: Mapping[str, Any], *, where: str = "message") -> Message:
    """Build a :class:`Message` from an OpenAI chat-format dict.

    Known fields: ``role``, ``content`` (string or text parts), ``tool_calls``,
    ``tool_call_id``, ``name``, ``reasoning_content``. ctxfold's own extra fields
    (``raw_content``, ``origin``, ``local_only``, ``partial``, ``created_at``, ``id``) are
    read too, so :func:`message_to_openai` output round-trips.
    """
    if not isinstance(data, Mapping):
        raise InteropError(f"{where}: expected an object, got {type(data).__name__}")
    role = data.get("role")
    if role not in ("system", "user", "assistant", "tool", "developer"):
        raise InteropError(f"{where}: unknown role {role!r}")
    if role == "developer":
        role = "system"
    calls = []
    for i, call in enumerate(data.get("tool_calls") or ()):
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping):
            raise InteropError(f"{where}.tool_calls[{i}]: missing 'function'")
        args = fn.get("arguments", "")
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
        calls.append(ToolCall(id=str(call.get("id", "")), name=str(fn.get("name", "")),
                              arguments=args))
    origin = data.get("origin", "user")
    for flag in ("local_only", "partial"):
        if not isinstance(data.get(flag, False), bool):
            raise InteropError(f"{where}: {flag} must be true or false, got {data[flag]!r:.40}")
    message = Message(
        role=cast(Role, role),
        content=_text_of(data.get("content"), where),
        raw_content=data.get("raw_content"),
        tool_calls=tuple(calls),
        tool_call_id=data.get("tool_call_id"),
        name=data.get("name"),
        reasoning_content=data.get("reasoning_content"),
        origin="host" if origin == "host" else "user",
        local_only=bool(data.get("local_only", False)),
        partial=bool(data.get("partial", False)),
        created_at=str(data.get("created_at", "")),
        id=str(data.get("id", "")),
    )
    return check_message(message, where=where)


def message_to_openai(message: Message, *, local_fields: bool = True) -> dict[str, Any]:
    """Translate a :class:`Message` into an OpenAI chat-format dict.

    With ``local_fields=False`` only provider-visible fields are emitted (what a provider
    would receive); otherwise ctxfold's local fields are included for a lossless round trip.
    """
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    if message.reasoning_content is not None:
        out["reasoning_content"] = message.reasoning_content
    if local_fields:
        defaults = Message(role=message.role)
        for field in ("raw_content", "origin", "local_only", "partial", "created_at", "id"):
            value = getattr(message, field)
            if value != getattr(defaults, field):
                out[field] = value
    return out


def tool_schema_from_openai(data: Mapping[str, Any]) -> ToolSchema:
    """Build a :class:`ToolSchema` from ``{"type": "function", "function": {...}}`` or the
    bare function object."""
    fn = data.get("function", data)
    return ToolSchema(
        name=str(fn.get("name", "")),
        description=str(fn.get("description", "")),
        parameters=dict(fn.get("parameters") or {}),
    )


def tool_schema_to_openai(tool: ToolSchema) -> dict[str, Any]:
    """The OpenAI chat-completions form of a tool schema."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": dict(tool.parameters),
        },
    }


def evolve(obj: Any, **changes: Any) -> Any:
    """``attrs.evolve`` re-exported so callers need not import attrs for it."""
    return attrs.evolve(obj, **changes)
