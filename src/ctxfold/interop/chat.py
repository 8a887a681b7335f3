"""OpenAI chat-completions format: message and tool dicts to ctxfold values and back.

:func:`message_from_openai` / :func:`message_to_openai` translate OpenAI chat-format message
dicts without loss: content given as a list of parts (text, ``image_url``, ``input_audio``,
``file``, or Responses input parts) is kept part by part as the exact JSON the host gave and
sent back exactly; fields ctxfold has no name for, a ``developer`` role and a ``null`` or
absent ``content`` are kept too. Values come back equal, and the parts byte-identical; the key
order of a whole message follows OpenAI's field order. :func:`tool_schema_from_openai` /
:func:`tool_schema_to_openai` do the same for function tools (chat or Responses form).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from ctxfold.kernel.errors import MessageError
from ctxfold.kernel.types import Message, Role, ToolCall, ToolSchema
from ctxfold.message_checks import check_message

#: Top-level keys of a chat message that map to a :class:`Message` field.
KNOWN_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name",
                        "reasoning_content"})
#: ctxfold's own local fields, read back so :func:`message_to_openai` output round-trips.
LOCAL_KEYS = ("raw_content", "origin", "local_only", "partial", "created_at", "id")
ROLES = ("system", "user", "assistant", "tool", "developer")


def dumps(value: Any) -> str:
    """Compact JSON, non-ASCII kept: how parts and unnamed fields are stored."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def join_text_parts(parts: list[Any]) -> str:
    """Join the text of OpenAI content parts (strings or ``{"text": ...}``); others skipped.
    Importers use it to flatten recorded transcripts; live messages keep their parts."""
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "\n".join(texts)


def _content(data: Mapping[str, Any], where: str, lossless: bool) -> dict[str, Any]:
    content = data.get("content")
    if content is None:
        if not lossless:
            return {}
        return {"content_form": "absent" if "content" not in data else "null"}
    if isinstance(content, str):
        return {"content": content}
    if not isinstance(content, list):
        raise MessageError(f"{where}.content: must be a string, null or a list of parts, got "
                           f"{type(content).__name__}")
    if not lossless:
        return {"content": join_text_parts(content)}
    for i, part in enumerate(content):
        if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
            raise MessageError(f"{where}.content[{i}]: a part must be an object with a string "
                               f"'type', got {part!r:.60}")
        if part["type"] in ("text", "input_text", "output_text") and not isinstance(
                part.get("text"), str):
            raise MessageError(f"{where}.content[{i}].text: a {part['type']} part needs a "
                               f"string 'text', got {part.get('text')!r:.40}")
    return {"parts": tuple(dumps(part) for part in content)}


def _tool_calls(data: Mapping[str, Any], where: str) -> tuple[ToolCall, ...]:
    raw = data.get("tool_calls")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise MessageError(f"{where}.tool_calls: must be a list, got {type(raw).__name__}")
    calls = []
    for i, call in enumerate(raw):
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping):
            raise MessageError(f"{where}.tool_calls[{i}]: missing 'function' object")
        args = fn.get("arguments", "")
        if not isinstance(args, str):
            args = dumps(args)
        for key in ("id", "name"):
            value = call.get(key) if key == "id" else fn.get(key)
            if value is not None and not isinstance(value, str):
                raise MessageError(f"{where}.tool_calls[{i}].{key}: must be a string, got "
                                   f"{type(value).__name__}")
        calls.append(ToolCall(id=call.get("id") or "", name=fn.get("name") or "",
                              arguments=args))
    return tuple(calls)


def message_from_openai(
    data: Mapping[str, Any], *, where: str = "message", lossless: bool = True
) -> Message:
    """Build a :class:`Message` from an OpenAI chat-format dict (see the module docstring).

    Raises :class:`MessageError` naming ``where`` and the field for an unknown role, a part
    without a ``type``, a tool call without a ``function`` and wrongly typed fields.
    ``lossless=False`` flattens instead (content parts to their text, unnamed fields, role
    aliases and null content dropped): what importers of recorded runs replay.
    """
    if not isinstance(data, Mapping):
        raise MessageError(f"{where}: expected an object, got {type(data).__name__}")
    role = data.get("role")
    if role not in ROLES:
        raise MessageError(f"{where}.role: unknown role {role!r}; allowed: {', '.join(ROLES)}")
    origin = data.get("origin", "user")
    for flag in ("local_only", "partial"):
        if not isinstance(data.get(flag, False), bool):
            raise MessageError(f"{where}.{flag}: must be true or false, got {data[flag]!r:.40}")
    unknown = {k: v for k, v in data.items()
               if lossless and k not in KNOWN_KEYS and k not in LOCAL_KEYS}
    message = Message(
        role=cast(Role, "system" if role == "developer" else role),
        raw_content=data.get("raw_content"),
        tool_calls=_tool_calls(data, where),
        tool_call_id=data.get("tool_call_id"),
        name=data.get("name"),
        reasoning_content=data.get("reasoning_content"),
        origin="host" if origin == "host" else "user",
        local_only=bool(data.get("local_only", False)),
        partial=bool(data.get("partial", False)),
        created_at=str(data.get("created_at", "")),
        id=str(data.get("id", "")),
        extra=dumps(unknown) if unknown else "",
        wire_role="developer" if lossless and role == "developer" else "",
        **_content(data, where, lossless),
    )
    return check_message(message, where=where)


def message_to_openai(message: Message, *, local_fields: bool = True) -> dict[str, Any]:
    """Translate a :class:`Message` into an OpenAI chat-format dict.

    With ``local_fields=False`` only provider-visible fields are emitted (what a provider
    would receive); otherwise ctxfold's local fields are included for a lossless round trip.
    """
    out: dict[str, Any] = {"role": message.wire_role or message.role}
    if message.parts:
        out["content"] = [json.loads(part) for part in message.parts]
    elif message.content_form == "null":
        out["content"] = None
    elif message.content_form != "absent":
        out["content"] = message.content
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
    if message.extra:
        out.update(json.loads(message.extra))
    if local_fields:
        defaults = Message(role=message.role)
        for field in LOCAL_KEYS:
            value = getattr(message, field)
            if value != getattr(defaults, field):
                out[field] = value
    return out


def tool_schema_from_openai(data: Mapping[str, Any], *, where: str = "tools") -> ToolSchema:
    """Build a :class:`ToolSchema` from a chat tool (``{"type": "function", "function":
    {...}}``), a Responses tool (``{"type": "function", "name": ...}``) or a bare function
    object. Other fields of the function (``strict``, ...) are kept in ``extra``."""
    if not isinstance(data, Mapping):
        raise MessageError(f"{where}: a tool must be an object, got {type(data).__name__}")
    fn = data.get("function", data)
    if not isinstance(fn, Mapping):
        raise MessageError(f"{where}.function: must be an object, got {type(fn).__name__}")
    kind = data.get("type", "function")
    if kind != "function":
        raise MessageError(f"{where}.type: only function tools can be offered, got {kind!r}")
    own = ("type",) if fn is data else ()  # a Responses tool's "type" is the wrapper's
    return checked_tool(fn, fn.get("parameters") or {}, where, skip=own)


def checked_tool(fn: Mapping[str, Any], schema: Any, where: str, *,
                 schema_field: str = "parameters", what: str = "a function tool",
                 skip: tuple[str, ...] = ()) -> ToolSchema:
    """The :class:`ToolSchema` of one tool definition ``fn`` (any wire format) whose JSON
    schema, under ``schema_field``, is ``schema``: name, description and schema checked, the
    other fields (but ``skip``) kept in ``extra`` and the field order in ``fields``, as
    :func:`function_fields` reads them back."""
    name, description = fn.get("name"), fn.get("description", "")
    if not isinstance(name, str) or not name:
        raise MessageError(f"{where}.name: {what} needs a non-empty string name")
    if not isinstance(description, str):
        raise MessageError(f"{where}.description: must be a string")
    if not isinstance(schema, Mapping):
        raise MessageError(f"{where}.{schema_field}: must be a JSON-schema object, got "
                           f"{type(schema).__name__}")
    unknown = {k: v for k, v in fn.items()
               if k not in ("name", "description", schema_field, *skip)}
    fields = tuple("parameters" if k == schema_field else k for k in fn if k not in skip)
    return ToolSchema(name=name, description=description, parameters=dict(schema),
                      extra=dumps(unknown) if unknown else "",
                      fields=() if fields == DEFAULT_TOOL_FIELDS else fields)


#: The function object's keys when a tool records no order of its own.
DEFAULT_TOOL_FIELDS = ("name", "description", "parameters")


def function_fields(tool: ToolSchema) -> dict[str, Any]:
    """The function object of ``tool``: its fields in the host's order, absent ones absent."""
    extra = json.loads(tool.extra) if tool.extra else {}
    own = {"name": tool.name, "description": tool.description,
           "parameters": dict(tool.parameters)}
    out = {k: own[k] if k in own else extra[k] for k in tool.fields or DEFAULT_TOOL_FIELDS}
    out.update({k: v for k, v in extra.items() if k not in out})
    return out


def tool_schema_to_openai(tool: ToolSchema) -> dict[str, Any]:
    """The OpenAI chat-completions form of a tool schema."""
    return {"type": "function", "function": function_fields(tool)}
