"""What a host may hand ctxfold, turned into ctxfold values: the one entry point the engine
uses for ``append(...)``, ``tools=`` and ``observe_usage(...)``.

Messages: a :class:`~ctxfold.Message`, an OpenAI chat message dict, a Responses input item
(a dict with a ``type``: message, function_call, function_call_output, reasoning, …), an
Anthropic message with blocks only that format has (``tool_use``, ``tool_result``,
``thinking``…: :mod:`ctxfold.interop.anthropic`; one message may become several), an
Anthropic response (the SDK's ``Message``: its role and content), or an SDK object (anything
with ``model_dump``: the SDK's ``ChatCompletionMessage``, Responses output items, Anthropic
content blocks inside a message's ``content`` list), dumped without its unset fields. Tools:
a :class:`~ctxfold.ToolSchema`, a chat or Responses function tool dict, an Anthropic tool
(``input_schema``), or an SDK object. Anything else raises :class:`MessageError` naming its
position.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ctxfold.interop.anthropic import from_anthropic, tool_from_anthropic
from ctxfold.interop.chat import message_from_openai, tool_schema_from_openai
from ctxfold.interop.responses import messages_from_items
from ctxfold.interop.usage import as_mapping
from ctxfold.kernel.errors import MessageError
from ctxfold.kernel.types import Message, ToolSchema

#: Content blocks only the Anthropic Messages format has: a message holding one is read as an
#: Anthropic message (text-only Anthropic messages read the same as chat messages).
ANTHROPIC_ONLY_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking",
                                   "server_tool_use", "document"})


#: Fields of an Anthropic response (``anthropic.types.Message``) that a request message does
#: not take (https://docs.anthropic.com/en/api/messages: a response has ``id``, ``type``,
#: ``model``, ``stop_reason``, ``stop_sequence``, ``usage``; a request message only ``role``
#: and ``content``).
ANTHROPIC_RESPONSE_FIELDS = frozenset({"stop_reason", "stop_sequence", "usage", "model"})


def _is_anthropic(data: Mapping[str, Any]) -> bool:
    content = data.get("content")
    return data.get("role") in ("user", "assistant") and isinstance(content, list) and any(
        isinstance(b, Mapping) and (b.get("type") in ANTHROPIC_ONLY_BLOCKS
                                    or (b.get("type") == "image" and "source" in b))
        for b in content)


def _is_anthropic_response(data: Mapping[str, Any]) -> bool:
    """An Anthropic response message (the SDK's ``Message``, or its dump): ``type``
    ``"message"`` as a Responses message item has too, but with a response's fields."""
    return (data.get("type") == "message" and data.get("role") == "assistant"
            and isinstance(data.get("content"), list)
            and not ANTHROPIC_RESPONSE_FIELDS.isdisjoint(data))


def _plain_blocks(data: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
    """``(data, anthropic)``: ``data`` with SDK objects in its ``content`` list as dicts
    (``model_dump`` without unset fields), and whether one of them was an Anthropic SDK
    block — ``{"role": "assistant", "content": response.content}`` is how the Anthropic SDK's
    users send a reply back
    (https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use), and
    such a message is read as an Anthropic one whatever its blocks."""
    content = data.get("content")
    if not isinstance(content, list | tuple) or all(isinstance(b, Mapping) for b in content):
        return data, False
    anthropic = any(type(b).__module__.split(".")[0] == "anthropic" for b in content)
    blocks = [as_mapping(b) for b in content]
    return {**data, "content": [b if b is not None else v
                                for b, v in zip(blocks, content, strict=True)]}, anthropic


def _is_item(data: Mapping[str, Any]) -> bool:
    """A dict with a string ``type`` is a Responses item (chat messages have none); a
    Responses "easy" message (``role`` and ``content`` only) reads the same either way."""
    return isinstance(data.get("type"), str)


def to_messages(values: Iterable[Any], *, where: str = "append") -> list[Message]:
    """Messages for what a host appends (see the module docstring). Responses items in a row
    are read together, so function calls join the assistant message they belong to."""
    out: list[Message] = []
    items: list[tuple[int, Mapping[str, Any]]] = []

    def flush() -> None:
        if items:
            start = items[0][0]
            out.extend(messages_from_items([d for _, d in items], where=f"{where}[{start}:]"))
            items.clear()

    for i, value in enumerate(values):
        if isinstance(value, Message):
            flush()
            out.append(value)
            continue
        data = as_mapping(value)
        if data is None:
            raise MessageError(
                f"{where}[{i}]: expected a ctxfold Message, an OpenAI message dict, a "
                f"Responses input item or an SDK message object, got {type(value).__name__}")
        data, sdk_blocks = _plain_blocks(data)
        response = _is_anthropic_response(data)
        if response:
            # Sent back as its request form, role and content (what the SDK's users write).
            data = {"role": "assistant", "content": data["content"]}
        elif _is_item(data):
            items.append((i, data))
            continue
        flush()
        if response or sdk_blocks or _is_anthropic(data):
            out.extend(from_anthropic(None, [data], where=f"{where}[{i}:]"))
        else:
            out.append(message_from_openai(data, where=f"{where}[{i}]"))
    flush()
    return out


def to_tools(values: Iterable[Any], *, where: str = "tools") -> tuple[ToolSchema, ...]:
    """Tool schemas for what a host offers (see the module docstring)."""
    out = []
    for i, value in enumerate(values):
        if isinstance(value, ToolSchema):
            out.append(value)
            continue
        data = as_mapping(value)
        if data is None:
            raise MessageError(f"{where}[{i}]: expected a ctxfold ToolSchema or an OpenAI "
                               f"function tool, got {type(value).__name__}")
        if "input_schema" in data and "function" not in data:
            out.append(tool_from_anthropic(data, where=f"{where}[{i}]"))
        else:
            out.append(tool_schema_from_openai(data, where=f"{where}[{i}]"))
    return tuple(out)
