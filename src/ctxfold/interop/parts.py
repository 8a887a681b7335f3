"""Content parts between the chat and Responses forms (and from Anthropic blocks: text and
images), and the chat form of messages with their parts: what a part type no format knows,
or a format cannot carry, is refused as."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxfold.interop.chat import message_to_openai
from ctxfold.kernel.errors import MessageError
from ctxfold.kernel.types import Message

CHAT_PARTS = frozenset({"text", "image_url", "input_audio", "file", "refusal"})
RESPONSES_PARTS = frozenset({"input_text", "output_text", "input_image", "input_file",
                             "input_audio", "refusal"})


#: Anthropic blocks with a chat and a Responses form: text and images as parts, tool calls
#: and results, thinking as reasoning text (``redacted_thinking`` is Anthropic-only state,
#: left out like a Responses reasoning item). Any other kept block is refused.
PORTABLE_ANTHROPIC_BLOCKS = frozenset({"text", "image", "tool_use", "tool_result", "thinking",
                                       "redacted_thinking"})


def check_portable(message: Message, where: str, target: str) -> None:
    """Refuse, naming it, an Anthropic block of ``message`` that ``target`` has no form for
    (server-tool blocks, documents…): it is never dropped."""
    for raw in message.anthropic_blocks:
        kind = json.loads(raw).get("type")
        if kind is not None and kind not in PORTABLE_ANTHROPIC_BLOCKS:
            raise MessageError(f"{where}: Anthropic block type {kind!r} has no {target} form; "
                               "send it to an Anthropic provider or remove the block")


def anthropic_image_url(part: Mapping[str, Any], where: str) -> str:
    """The URL (a ``data:`` URL for base64) of an Anthropic ``image`` block."""
    source = part.get("source")
    if isinstance(source, Mapping) and source.get("type") == "base64":
        return f"data:{source.get('media_type')};base64,{source.get('data')}"
    if isinstance(source, Mapping) and isinstance(source.get("url"), str):
        return str(source["url"])
    raise MessageError(f"{where}: an Anthropic image with a {_kind(source)} source has no "
                       "OpenAI form (only base64 and url sources do)")


def _kind(source: Any) -> str:
    return repr(source.get("type")) if isinstance(source, Mapping) else "missing"


def part_to_responses(part: dict[str, Any], role: str, where: str) -> dict[str, Any]:
    """One content part in the Responses form (unchanged when it already is)."""
    kind = part.get("type")
    if kind in RESPONSES_PARTS:
        return part
    if kind == "image":
        return {"type": "input_image", "image_url": anthropic_image_url(part, where)}
    if kind == "text":
        return {"type": "output_text" if role == "assistant" else "input_text",
                "text": part.get("text", "")}
    if kind == "image_url":
        image = part.get("image_url")
        image = image if isinstance(image, Mapping) else {"url": image}
        out: dict[str, Any] = {"type": "input_image", "image_url": image.get("url")}
        if "detail" in image:
            out["detail"] = image["detail"]
        return out
    if kind == "file":
        file = part.get("file")
        return {"type": "input_file", **(file if isinstance(file, Mapping) else {})}
    raise MessageError(f"{where}: content part type {kind!r} has no OpenAI Responses form; "
                       "send it to a chat provider or remove the part")


def part_to_chat(part: dict[str, Any], where: str) -> dict[str, Any]:
    """One content part in the chat-completions form (unchanged when it already is)."""
    kind = part.get("type")
    if kind in CHAT_PARTS:
        return part
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": anthropic_image_url(part, where)}}
    if kind in ("input_text", "output_text"):
        return {"type": "text", "text": part.get("text", "")}
    if kind == "input_image":
        image: dict[str, Any] = {"url": part.get("image_url") or part.get("file_id")}
        if "detail" in part:
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        return {"type": "file", "file": {k: v for k, v in part.items() if k != "type"}}
    raise MessageError(f"{where}: content part type {kind!r} has no chat-completions form; "
                       "send it to a Responses provider or remove the part")


#: Responses item types with a chat-completions form (a reasoning item is Responses-only state
#: the chat form carries as ``reasoning_content``, when the message has one).
CHAT_ITEMS = frozenset({"message", "function_call", "function_call_output", "reasoning"})


def chat_messages(messages: Sequence[Message], *, part_types: frozenset[str] = CHAT_PARTS,
                  target: str = "chat completions",
                  as_given: bool = False) -> list[dict[str, Any]]:
    """Provider-visible chat dicts of ``messages`` (``local_only`` skipped). Parts of a
    message that came as Responses items go out in their chat form; with ``as_given`` (what
    the host sends itself) a chat message's parts go out exactly as the host gave them,
    otherwise (a provider) in their chat form, and a type outside ``part_types`` (what
    ``target`` accepts) is refused. A part type no OpenAI format knows, or a Responses item
    with no chat form, is a :class:`MessageError` naming the message and the type — never
    dropped."""
    out = []
    for i, message in enumerate(messages):
        if message.local_only:
            continue
        for raw in message.responses_items:
            kind = json.loads(raw).get("type")
            if kind not in CHAT_ITEMS:
                raise MessageError(f"messages[{i}]: Responses item type {kind!r} has no "
                                   f"{target} form; send with to_responses() or a Responses "
                                   "provider")
        check_portable(message, f"messages[{i}]", target)
        item = message_to_openai(message, local_fields=False)
        if message.parts:
            keep = as_given and not message.responses_items and not message.anthropic_blocks
            item["content"] = [_chat_part(part, f"messages[{i}].content[{j}]", part_types,
                                          target, keep) for j, part in enumerate(item["content"])]
            if message.anthropic_blocks:  # cache_control, citations: Anthropic's own fields
                item["content"] = [{"type": "text", "text": p["text"]} if p["type"] == "text"
                                   else p for p in item["content"]]
        out.append(item)
    return out


def _chat_part(part: dict[str, Any], where: str, accepted: frozenset[str], target: str,
               keep: bool) -> dict[str, Any]:
    if keep:
        if part.get("type") not in CHAT_PARTS | RESPONSES_PARTS:
            raise MessageError(f"{where}: content part type {part.get('type')!r} is no OpenAI "
                               "content part; remove it or convert it before appending")
        return part
    converted = part_to_chat(part, where)
    if converted.get("type") not in accepted:
        raise MessageError(f"{where}: {target} does not accept content parts of type "
                           f"{converted.get('type')!r} (it takes {', '.join(sorted(accepted))})"
                           "; remove the part or use a provider that takes it")
    return converted


def parts_of(message: Message) -> list[dict[str, Any]]:
    """The message's content parts as dicts."""
    return [json.loads(raw) for raw in message.parts]
