"""OpenAI chat-completions format: message and tool-schema dicts to ctxfold values and back.

:func:`message_from_openai` / :func:`message_to_openai` translate OpenAI chat-format message
dicts, losslessly for the fields ctxfold knows; :func:`tool_schema_from_openai` /
:func:`tool_schema_to_openai` do the same for function tools.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from ctxfold.kernel.codec import check_message
from ctxfold.kernel.errors import MessageError
from ctxfold.kernel.types import Message, Role, ToolCall, ToolSchema


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
    raise MessageError(f"{where}: content must be a string or a list of text parts")


def message_from_openai(data: Mapping[str, Any], *, where: str = "message") -> Message:
    """Build a :class:`Message` from an OpenAI chat-format dict.

    Known fields: ``role``, ``content`` (string or text parts), ``tool_calls``,
    ``tool_call_id``, ``name``, ``reasoning_content``. ctxfold's own extra fields
    (``raw_content``, ``origin``, ``local_only``, ``partial``, ``created_at``, ``id``) are
    read too, so :func:`message_to_openai` output round-trips.
    """
    if not isinstance(data, Mapping):
        raise MessageError(f"{where}: expected an object, got {type(data).__name__}")
    role = data.get("role")
    if role not in ("system", "user", "assistant", "tool", "developer"):
        raise MessageError(f"{where}: unknown role {role!r}")
    if role == "developer":
        role = "system"
    calls = []
    for i, call in enumerate(data.get("tool_calls") or ()):
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping):
            raise MessageError(f"{where}.tool_calls[{i}]: missing 'function'")
        args = fn.get("arguments", "")
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
        calls.append(ToolCall(id=str(call.get("id", "")), name=str(fn.get("name", "")),
                              arguments=args))
    origin = data.get("origin", "user")
    for flag in ("local_only", "partial"):
        if not isinstance(data.get(flag, False), bool):
            raise MessageError(f"{where}: {flag} must be true or false, got {data[flag]!r:.40}")
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
