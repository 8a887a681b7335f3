"""OpenAI Responses format: input items to ctxfold messages and back, and content parts
between the chat and Responses forms.

A part is converted only when it crosses formats: chat parts sent to a Responses endpoint
become Responses input parts (``text`` → ``input_text``/``output_text``, ``image_url`` →
``input_image``, ``file`` → ``input_file``), Responses parts sent to a chat endpoint become
chat parts, and parts already in the target form are sent exactly as the host gave them. A
part type the target format has no equivalent for raises :class:`MessageError` naming it —
it is never dropped.

Responses input items map to messages: a ``message`` item to a message (its parts kept as
given), the items of one reply (``reasoning`` and other item types, at most one assistant
``message``, ``function_call`` items) to one assistant message, a ``function_call_output``
item to a ``tool`` message. Every item is also kept as given (``Message.responses_items``,
the modeled fields nulled), so ids, statuses, annotations and reasoning items go back out
exactly; the message's own fields fill the nulls, so a bounded or pruned tool result goes
out bounded or pruned. Sent to a chat-completions provider, items chat has no form for
(reasoning items) are left out: chat has no place for them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import attrs

from ctxfold.interop.chat import (
    dumps,
    function_fields,
)
from ctxfold.interop.parts import check_portable, part_to_responses, parts_of
from ctxfold.kernel.errors import MessageError
from ctxfold.kernel.types import Message, Role, ToolCall, ToolSchema
from ctxfold.message_checks import check_message

#: The item fields a :class:`Message` models, per item type; the rest are kept in
#: ``Message.responses_items`` (with these set to null, so the key order survives).
MODELED_FIELDS = {
    "message": ("role", "content"),
    "function_call": ("call_id", "name", "arguments"),
    "function_call_output": ("call_id", "output"),
}


def input_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The Responses ``input`` list for ``messages`` (local-only messages skipped)."""
    items: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if not m.local_only:
            check_portable(m, f"messages[{i}]", "OpenAI Responses")
            items.extend(_items_of(m, f"messages[{i}]"))
    return items


def _items_of(m: Message, where: str) -> list[dict[str, Any]]:
    """The items of one message: its own fields, laid into the items it came from."""
    modeled = _modeled_items(m, where)
    kept = [json.loads(raw) for raw in m.responses_items]
    if not kept:
        return modeled
    kinds = [item["type"] for item in kept if item["type"] in MODELED_FIELDS]
    if kinds != [item["type"] for item in modeled]:
        return modeled  # the message changed shape since it was appended: send its fields
    fill = iter(modeled)
    out = []
    for item in kept:
        if item["type"] in MODELED_FIELDS:
            values = next(fill)
            if (item["type"] == "message" and item.get("id") and values.get("role") == "assistant"
                    and isinstance(values.get("content"), str)):
                # A model's output message item holds parts, never a bare string.
                values = {**values, "content": [{"type": "output_text",
                                                 "text": values["content"],
                                                 "annotations": []}]}
            item = {k: values[k] if k in MODELED_FIELDS[item["type"]] else v
                    for k, v in item.items()}
        out.append(item)
    return out



def _modeled_items(m: Message, where: str) -> list[dict[str, Any]]:
    if m.role == "tool":
        output: Any = m.content
        if m.parts:
            output = [part_to_responses(p, "user", f"{where}.content") for p in parts_of(m)]
        return [{"type": "function_call_output", "call_id": m.tool_call_id or "",
                 "output": output}]
    items: list[dict[str, Any]] = []
    has_message_item = any(json.loads(raw)["type"] == "message" for raw in m.responses_items)
    if m.role != "assistant" or m.content or m.parts or has_message_item or not (
            m.tool_calls or m.responses_items):
        content: Any = m.content
        if m.parts:
            content = [part_to_responses(p, m.role, f"{where}.content[{j}]")
                       for j, p in enumerate(parts_of(m))]
        items.append({"type": "message", "role": m.wire_role or m.role, "content": content})
    for call in m.tool_calls:
        items.append({"type": "function_call", "call_id": call.id, "name": call.name,
                      "arguments": call.arguments})
    return items


def tool_item(tool: ToolSchema) -> dict[str, Any]:
    """A tool schema in the Responses function form (no ``function`` wrapper)."""
    return {"type": "function", **function_fields(tool)}


def _message(item: Mapping[str, Any], where: str) -> Message:
    role = item.get("role")
    if role not in ("system", "developer", "user", "assistant"):
        raise MessageError(f"{where}.role: unknown role {role!r} for a message item")
    content = item.get("content")
    fields: dict[str, Any] = {}
    if isinstance(content, str):
        fields["content"] = content
    elif isinstance(content, list):
        for j, part in enumerate(content):
            if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
                raise MessageError(f"{where}.content[{j}]: a part must be an object with a "
                                   "string 'type'")
        fields["parts"] = tuple(dumps(part) for part in content)
    else:
        raise MessageError(f"{where}.content: must be a string or a list of parts")
    return Message(role=cast(Role, "system" if role == "developer" else role),
                   wire_role="developer" if role == "developer" else "", **fields)


def _call(item: Mapping[str, Any], where: str) -> ToolCall:
    values = [item.get(k) for k in ("call_id", "name", "arguments")]
    if not all(isinstance(v, str) for v in values):
        raise MessageError(f"{where}: a function_call item needs string call_id, name and "
                           "arguments")
    return ToolCall(id=values[0], name=values[1], arguments=values[2])  # type: ignore[arg-type]


def _output(item: Mapping[str, Any], where: str) -> Message:
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str):
        raise MessageError(f"{where}.call_id: a function_call_output item needs a string")
    if isinstance(output, str):
        return Message(role="tool", content=output, tool_call_id=call_id)
    if isinstance(output, list):
        return Message(role="tool", parts=tuple(dumps(p) for p in output),
                       tool_call_id=call_id)
    raise MessageError(f"{where}.output: must be a string or a list of parts")


def kept_item(item: Mapping[str, Any], kind: str | None = None) -> str:
    """The item as ``Message.responses_items`` keeps it: modeled fields nulled."""
    kind = kind if kind is not None else str(item.get("type", "message"))
    modeled = MODELED_FIELDS.get(kind, ())
    return dumps({k: None if k in modeled else v for k, v in item.items()})


def _with_item(message: Message, item: Mapping[str, Any], kind: str) -> Message:
    return attrs.evolve(message, responses_items=(*message.responses_items, kept_item(item, kind)))


def _open_turn(out: list[Message], *, for_message_item: bool) -> Message | None:
    """The assistant message the next item of this reply belongs to, if any: items of one
    reply (reasoning, one message, function calls) make one assistant message."""
    last = out[-1] if out else None
    if last is None or last.role != "assistant" or not last.responses_items:
        return None
    if for_message_item:
        kinds = [json.loads(raw)["type"] for raw in last.responses_items]
        if "message" in kinds or "function_call" in kinds:
            return None
    return last


def messages_from_items(items: Iterable[Mapping[str, Any]], *, where: str = "input",
                        lossless: bool = True) -> list[Message]:
    """Messages for a list of Responses input items (see the module docstring).

    With ``lossless`` every item's other fields (ids, statuses, annotations) and items of
    other types (``reasoning``…) are kept in ``Message.responses_items``; without it
    (importers of recorded runs) only the modeled fields are kept, other item types refused.
    """
    out: list[Message] = []
    for i, item in enumerate(items):
        here = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise MessageError(f"{here}: an input item must be an object")
        kind = item.get("type", "message")
        if not isinstance(kind, str):
            raise MessageError(f"{here}.type: must be a string")
        if kind == "message":
            message = check_message(_message(item, here), where=here)
            turn = _open_turn(out, for_message_item=True) if lossless else None
            if turn is not None and message.role == "assistant":
                out[-1] = attrs.evolve(turn, content=message.content, parts=message.parts,
                                       content_form="")
                message = out.pop()
            out.append(_with_item(message, item, kind) if lossless else message)
        elif kind == "function_call":
            call = _call(item, here)
            last = out[-1] if out else None
            if last is not None and last.role == "assistant":
                out[-1] = attrs.evolve(last, tool_calls=(*last.tool_calls, call))
            else:
                out.append(Message(role="assistant", content_form="null", tool_calls=(call,)))
            if lossless:
                out[-1] = _with_item(out[-1], item, kind)
        elif kind == "function_call_output":
            message = check_message(_output(item, here), where=here)
            out.append(_with_item(message, item, kind) if lossless else message)
        elif lossless:
            turn = _open_turn(out, for_message_item=False)
            if turn is None:
                out.append(Message(role="assistant", content_form="absent"))
            out[-1] = _with_item(out[-1], item, kind)
        else:
            raise MessageError(f"{here}.type: input item type {kind!r} cannot be kept in a "
                               "transcript; allowed: message, function_call, "
                               "function_call_output")
    return out

