"""Anthropic Messages format: ctxfold messages to ``system`` + ``messages`` and back, tool
schemas, usage, and where the prompt-cache breakpoints go.

Wire reference: https://docs.anthropic.com/en/api/messages (content blocks, ``system`` as a
string or a list of text blocks) and the official SDK's types
(https://github.com/anthropics/anthropic-sdk-python, ``src/anthropic/types``).

**Messages.** An Anthropic message maps to ctxfold messages as follows:

* an ``assistant`` message to one assistant message: its text to ``content`` (several text
  blocks, or other content blocks: ``parts``, each the exact block), its ``tool_use`` blocks to
  ``tool_calls`` (``input`` as the JSON ``arguments``), one ``thinking`` block's text to
  ``reasoning_content``;
* a ``user`` message to one ``tool`` message per ``tool_result`` block (``tool_call_id``; its
  content, a string or a list of blocks, to ``content`` or ``parts``) and one ``user`` message
  per run of other blocks (text, images, documents: ``content`` or ``parts`` as above); a
  string content is a plain user message;
* ``system`` (a string or text blocks) to one ``system`` message.

Every block is also kept as given (``Message.anthropic_blocks``, the modeled fields nulled),
so thinking signatures, ``redacted_thinking``, ``cache_control``, ``is_error``, citations
and server-tool blocks go back out exactly (but for blank text blocks and empty assistant
turns, which the API refuses: :func:`_sendable`), and where one Anthropic message ends and
the next begins is kept with them; the message's own fields fill the nulls, so a bounded or
pruned tool result goes out bounded or pruned. A message whose fields no longer fit its kept
blocks (it was rewritten after it was appended) is sent from its fields alone, as a message
that never came from this format is: a ``tool`` message joins the previous run of tool
results (so consecutive results go out as one user message), reasoning without a signature
is left out (the API refuses a thinking block without one), chat and Responses content parts
become Anthropic blocks (``image_url`` data URLs become base64 image sources), and a system
message after the first non-system message goes out as a user message (Anthropic has no
system role inside ``messages``).

**Breakpoints.** :func:`place_breakpoints` marks the blocks ctxfold knows are stable (see its
docstring and ``docs/providers.md``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import attrs

from ctxfold.interop.chat import checked_tool, dumps, function_fields
from ctxfold.interop.usage import anthropic_usage, as_mapping
from ctxfold.kernel.errors import MessageError
from ctxfold.kernel.types import Message, Role, ToolCall, ToolSchema
from ctxfold.message_checks import check_message

#: Blocks a message carries as its content (``content`` for one text block, else ``parts``).
CONTENT_BLOCKS = frozenset({"text", "image", "document", "search_result"})
#: Blocks that can never carry ``cache_control`` (the API refuses it on them).
UNCACHEABLE_BLOCKS = frozenset({"thinking", "redacted_thinking"})
#: Most breakpoints one request may carry
#: (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching).
MAX_BREAKPOINTS = 4
#: How far back (in content blocks) the API looks from a breakpoint for an earlier cache
#: entry, "about 20 blocks" (same page).
LOOKBACK_BLOCKS = 20
_ENVELOPE_FIELDS = ("role", "content")
_DATA_URL = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)


# -- Anthropic → ctxfold ---------------------------------------------------------------------------


def from_anthropic(system: Any, messages: Sequence[Any], *,
                   where: str = "messages") -> list[Message]:
    """ctxfold messages for an Anthropic ``system`` (``None``, a string or text blocks) and
    ``messages`` (dicts or the SDK's objects); see the module docstring. Raises
    :class:`MessageError` naming the location (``messages[3].content[1]``) on bad input."""
    out = _system(system)
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise MessageError(f"{where}: must be a list of messages, got "
                           f"{type(messages).__name__}")
    for i, value in enumerate(messages):
        here = f"{where}[{i}]"
        data = as_mapping(value)
        if data is None:
            raise MessageError(f"{here}: a message must be an object, got "
                               f"{type(value).__name__}")
        out.extend(_message(data, here))
    return out


def _system(system: Any) -> list[Message]:
    if system is None:
        return []
    if isinstance(system, str):
        return [check_message(Message(role="system", content=system), where="system")]
    if not isinstance(system, list | tuple):
        raise MessageError(f"system: must be a string or a list of text blocks, got "
                           f"{type(system).__name__}")
    if not system:
        return []
    blocks = _blocks(system, "system")
    for j, block in enumerate(blocks):
        if block["type"] != "text":
            raise MessageError(f"system[{j}].type: the system prompt takes text blocks only, "
                               f"got {block['type']!r}")
    return [check_message(_content_message("system", blocks, "system", []), where="system")]


def _blocks(raw: Sequence[Any], where: str) -> list[Mapping[str, Any]]:
    blocks = []
    for j, value in enumerate(raw):
        block = as_mapping(value)
        if block is None or not isinstance(block.get("type"), str):
            raise MessageError(f"{where}[{j}]: a content block must be an object with a string "
                               f"'type', got {value!r:.60}")
        if block["type"] == "text" and not isinstance(block.get("text"), str):
            raise MessageError(f"{where}[{j}].text: a text block needs a string 'text'")
        blocks.append(block)
    return blocks


def _message(data: Mapping[str, Any], where: str) -> list[Message]:
    role = data.get("role")
    if role not in ("user", "assistant"):
        raise MessageError(f"{where}.role: must be 'user' or 'assistant', got {role!r}")
    content = data.get("content")
    if isinstance(content, str):
        if data.keys() - set(_ENVELOPE_FIELDS):
            # Other message fields are kept on an envelope, which needs content blocks.
            content = [{"type": "text", "text": content}]
        else:
            return [check_message(Message(role=cast(Role, role), content=content),
                                  where=where)]
    if not isinstance(content, list | tuple):
        raise MessageError(f"{where}.content: must be a string or a list of content blocks, "
                           f"got {type(content).__name__}")
    blocks = _blocks(content, f"{where}.content")
    envelope = [dumps({k: None if k in _ENVELOPE_FIELDS else v for k, v in data.items()})]
    if role == "assistant":
        for j, block in enumerate(blocks):
            if block["type"] == "tool_result":
                raise MessageError(f"{where}.content[{j}]: a tool_result block belongs in a "
                                   "user message")
        return [check_message(_content_message("assistant", blocks, f"{where}.content",
                                               envelope), where=where)]
    out: list[Message] = []
    run: list[Mapping[str, Any]] = []
    start = 0
    for j, block in enumerate(blocks):
        if block["type"] != "tool_result":
            if not run:
                start = j
            run.append(block)
            continue
        if run:
            out.append(_content_message("user", run, f"{where}.content", envelope, start))
            run, envelope = [], []
        out.append(_tool_result(block, f"{where}.content[{j}]", envelope))
        envelope = []
    if run or not blocks:
        out.append(_content_message("user", run, f"{where}.content", envelope, start))
    return [check_message(m, where=where) for m in out]


def _nulled(block: Mapping[str, Any], fields: Sequence[str]) -> str:
    return dumps({k: None if k in fields else v for k, v in block.items()})


def _content_message(role: str, blocks: Sequence[Mapping[str, Any]], where: str,
                     kept: list[str], offset: int = 0) -> Message:
    """One message from a run of blocks that holds no ``tool_result``."""
    carried = [b for b in blocks if b["type"] in CONTENT_BLOCKS]
    one_text = len(carried) == 1 and carried[0]["type"] == "text"
    thinking = [b for b in blocks if b["type"] == "thinking"]
    fields: dict[str, Any] = {}
    calls: list[ToolCall] = []
    for j, block in enumerate(blocks, start=offset):
        kind = block["type"]
        if kind in CONTENT_BLOCKS:
            # One text block: its text is the content; otherwise every block is a part.
            kept.append(_nulled(block, ("text",) if one_text else
                                [k for k in block if k != "type"]))
        elif kind == "tool_use":
            if role != "assistant":
                raise MessageError(f"{where}[{j}]: a tool_use block belongs in an assistant "
                                   "message")
            calls.append(_call(block, f"{where}[{j}]"))
            kept.append(_nulled(block, ("id", "name", "input")))
        elif kind == "thinking" and len(thinking) == 1:
            if not isinstance(block.get("thinking"), str):
                raise MessageError(f"{where}[{j}].thinking: a thinking block needs a string "
                                   "'thinking'")
            fields["reasoning_content"] = block["thinking"]
            kept.append(_nulled(block, ("thinking",)))
        else:  # several thinking blocks, redacted_thinking, server tools, future types
            kept.append(dumps(block))
    if one_text:
        fields["content"] = carried[0]["text"]
    elif carried:
        fields["parts"] = tuple(dumps(b) for b in carried)
    return Message(role=cast(Role, role), tool_calls=tuple(calls),
                   anthropic_blocks=tuple(kept), **fields)


def _call(block: Mapping[str, Any], where: str) -> ToolCall:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise MessageError(f"{where}: a tool_use block needs a string 'id' and 'name'")
    if not isinstance(arguments, Mapping):
        raise MessageError(f"{where}.input: must be an object, got {type(arguments).__name__}")
    return ToolCall(id=call_id, name=name, arguments=dumps(arguments))


def _tool_result(block: Mapping[str, Any], where: str, kept: list[str]) -> Message:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise MessageError(f"{where}.tool_use_id: a tool_result block needs a string")
    content = block.get("content", "")
    fields: dict[str, Any] = {}
    if isinstance(content, str):
        fields["content"] = content
    elif isinstance(content, list | tuple):
        fields["parts"] = tuple(dumps(b) for b in _blocks(content, f"{where}.content"))
    else:
        raise MessageError(f"{where}.content: must be a string or a list of content blocks, "
                           f"got {type(content).__name__}")
    # An empty list stays in the kept block: the message has no other way to tell it from "".
    kept.append(_nulled(block, ("tool_use_id",) if content == [] else ("tool_use_id",
                                                                        "content")))
    return Message(role="tool", tool_call_id=call_id, anthropic_blocks=tuple(kept), **fields)


# -- ctxfold → Anthropic ---------------------------------------------------------------------------


@attrs.frozen
class Wire:
    """The Anthropic form of a message list: ``system`` blocks, ``messages``, and for each
    input message the index of the Anthropic message it went into (``None``: the system
    prompt or a local-only message)."""

    system: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    positions: list[int | None]


def to_anthropic(messages: Sequence[Message]) -> tuple[list[dict[str, Any]],
                                                       list[dict[str, Any]]]:
    """``(system blocks, messages)`` for ``messages`` (local-only ones skipped); see the
    module docstring. Raises :class:`MessageError` naming the message for what this format
    cannot carry (a tool message without a call id, arguments that are not JSON)."""
    wire = wire_of(messages)
    return wire.system, wire.messages


def wire_of(messages: Sequence[Message]) -> Wire:
    """:func:`to_anthropic` with the position of each input message (what a provider needs
    to put a breakpoint on the checkpoint's summary message)."""
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    positions: list[int | None] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if m.local_only:
            positions.append(None)
            continue
        if m.role == "system" and not out:
            system.extend(_system_blocks(m, where))
            positions.append(None)
            continue
        role = "assistant" if m.role == "assistant" else "user"
        content, envelope, continues = _content_of(m, where)
        if role == "assistant":
            content = _sendable(content)
            if not content:
                positions.append(None)  # an empty reply: nothing the API takes back
                continue
        last = out[-1] if out else None
        if (continues and last is not None and last["role"] == role
                and isinstance(last["content"], list) and isinstance(content, list)):
            last["content"].extend(content)
        else:
            env = envelope if envelope is not None else {"role": None, "content": None}
            out.append({k: role if k == "role" else content if k == "content" else v
                        for k, v in env.items()})
        positions.append(len(out) - 1)
    return Wire(system=system, messages=out, positions=positions)


def _sendable(content: Any) -> Any:
    """An assistant message's content without the text the API refuses to take back.

    Claude may answer with no content or with an empty text block (kept as received), but a
    request refuses both: "all messages must have non-empty content except for the optional
    final assistant message" and "text content blocks must be non-empty"
    (https://docs.anthropic.com/en/api/messages; reports:
    https://github.com/anthropics/claude-code/issues/3196,
    https://github.com/anthropics/claude-code/issues/6774). Blank text blocks are left out;
    what is left may be empty, and :func:`wire_of` then leaves the whole turn out. That keeps
    the request valid: an empty turn has no tool call whose result would follow, and the
    API combines the user turns on either side of it into one, as it does any consecutive
    turns of one role."""
    if isinstance(content, str):
        return content if content.strip() else ""
    if isinstance(content, list):
        return [b for b in content if not (isinstance(b, Mapping) and b.get("type") == "text"
                                           and not str(b.get("text") or "").strip())]
    return content


def _system_blocks(m: Message, where: str) -> list[dict[str, Any]]:
    kept = _kept(m)
    if kept is not None and kept[0] is None:
        filled = _fill(m, kept[1], where)
        if filled is not None:
            return filled
    if m.parts:
        return [_part(json.loads(p), f"{where}.content[{j}]") for j, p in enumerate(m.parts)]
    return [{"type": "text", "text": m.content}]


def _kept(m: Message) -> tuple[dict[str, Any] | None, list[dict[str, Any]]] | None:
    """``(envelope, blocks)`` kept on ``m``, or ``None`` when it kept none."""
    if not m.anthropic_blocks:
        return None
    entries = [json.loads(raw) for raw in m.anthropic_blocks]
    if "type" not in entries[0]:
        return entries[0], entries[1:]
    return None, entries


def _content_of(m: Message, where: str) -> tuple[Any, dict[str, Any] | None, bool]:
    """``(content, envelope, continues)``: the message's Anthropic content, the Anthropic
    message it opened (``None``: a plain one) and whether it continues the previous one."""
    kept = _kept(m)
    if kept is not None:
        envelope, entries = kept
        filled = _fill(m, entries, where)
        if filled is not None:
            return filled, envelope, envelope is None
    if m.role == "tool":
        return [_native_result(m, where)], None, True
    if m.role == "assistant":
        blocks = _native_content(m, where)
        if m.tool_calls:
            blocks += [_native_call(c, f"{where}.tool_calls[{k}]")
                       for k, c in enumerate(m.tool_calls)]
        elif not m.parts:
            return m.content, None, False
        return blocks, None, False
    return (_native_content(m, where) if m.parts else m.content), None, False


def _fill(m: Message, entries: list[dict[str, Any]], where: str) -> list[dict[str, Any]] | None:
    """The kept blocks with the message's fields in their nulls, or ``None`` when the
    message no longer has the shape the blocks were kept from."""
    kinds = [e.get("type") for e in entries]
    carried = [e for e in entries if e.get("type") in CONTENT_BLOCKS]
    if (kinds.count("tool_use") != len(m.tool_calls)
            or kinds.count("tool_result") != (1 if m.role == "tool" else 0)):
        return None
    if m.role != "tool":
        if m.parts and len(carried) != len(m.parts):
            return None
        if not m.parts and (len(carried) > 1 or (m.content and not carried)
                            or (carried and carried[0].get("type") != "text")):
            return None
    parts: Iterator[str] = iter(m.parts)
    calls = iter(m.tool_calls)
    out = []
    for entry in entries:
        kind = entry.get("type")
        if kind == "tool_result":
            content: Any = [json.loads(p) for p in m.parts] if m.parts else m.content
            if content == "" and entry.get("content") == []:
                content = []
            entry = _filled(entry, {"tool_use_id": m.tool_call_id, "content": content})
        elif kind == "tool_use":
            call = next(calls)
            entry = _filled(entry, {"id": call.id, "name": call.name,
                                    "input": _input(call, f"{where}.tool_calls")})
        elif kind == "thinking" and entry.get("thinking") is None:
            if m.reasoning_content is None:
                continue  # reasoning dropped since: a thinking block without text is refused
            entry = _filled(entry, {"thinking": m.reasoning_content})
        elif kind in CONTENT_BLOCKS and m.role != "tool":
            entry = json.loads(next(parts)) if m.parts else _filled(entry, {"text": m.content})
        out.append(entry)
    return out


def _filled(entry: dict[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: values.get(k, v) for k, v in entry.items()}


def _input(call: ToolCall, where: str) -> Any:
    if not call.arguments:
        return {}
    try:
        value = json.loads(call.arguments)
    except ValueError:
        raise MessageError(f"{where}: the arguments of call {call.id!r} are not JSON "
                           f"({call.arguments[:60]!r}); Anthropic's tool_use takes a JSON "
                           "object as input — repair or remove the call") from None
    if not isinstance(value, dict):
        raise MessageError(f"{where}: the arguments of call {call.id!r} are not a JSON object; "
                           "Anthropic's tool_use takes an object as input")
    return value


def _native_content(m: Message, where: str) -> list[dict[str, Any]]:
    if m.parts:
        return [_part(json.loads(p), f"{where}.content[{j}]") for j, p in enumerate(m.parts)]
    return [{"type": "text", "text": m.content}] if m.content else []


def _native_call(call: ToolCall, where: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name,
            "input": _input(call, where)}


def _native_result(m: Message, where: str) -> dict[str, Any]:
    if not m.tool_call_id:
        raise MessageError(f"{where}: a tool message needs a tool_call_id to become an "
                           "Anthropic tool_result")
    content: Any = ([_part(json.loads(p), f"{where}.content[{j}]")
                     for j, p in enumerate(m.parts)] if m.parts else m.content)
    return {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": content}


def _part(part: dict[str, Any], where: str) -> dict[str, Any]:
    """One content part as an Anthropic block (unchanged when it already is one)."""
    kind = part.get("type")
    if kind in CONTENT_BLOCKS:
        return part
    if kind in ("input_text", "output_text"):
        return {"type": "text", "text": part.get("text", "")}
    if kind in ("image_url", "input_image"):
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        if not isinstance(url, str):
            raise MessageError(f"{where}: an image part without a URL has no Anthropic form")
        match = _DATA_URL.fullmatch(url)
        source = ({"type": "base64", "media_type": match.group(1), "data": match.group(2)}
                  if match else {"type": "url", "url": url})
        return {"type": "image", "source": source}
    raise MessageError(f"{where}: content part type {kind!r} has no Anthropic Messages form; "
                       "remove the part or send it to a provider that takes it")


# -- tools and usage -------------------------------------------------------------------------------


def tool_to_anthropic(tool: ToolSchema) -> dict[str, Any]:
    """A tool schema in the Anthropic form (``input_schema`` for ``parameters``; other fields
    such as ``cache_control`` or ``type`` as kept, in the host's order)."""
    return {("input_schema" if k == "parameters" else k): v
            for k, v in function_fields(tool).items()}


def tool_from_anthropic(data: Mapping[str, Any], *, where: str = "tools") -> ToolSchema:
    """A :class:`ToolSchema` for an Anthropic tool definition (a dict or the SDK's object);
    fields other than ``name``, ``description`` and ``input_schema`` are kept in ``extra``."""
    fields = as_mapping(data)
    if fields is None:
        raise MessageError(f"{where}: a tool must be an object, got {type(data).__name__}")
    return checked_tool(fields, fields.get("input_schema", {}), where,
                        schema_field="input_schema", what="a tool")


#: :class:`Usage` for an Anthropic ``usage`` object, a dict or the SDK's object
#: (:func:`ctxfold.interop.usage.anthropic_usage`).
usage_from_anthropic = anthropic_usage


# -- breakpoints -----------------------------------------------------------------------------------


def place_breakpoints(body: dict[str, Any], *, ttl: str, min_tokens: int,
                      count: Callable[[Any], int], checkpoint: int | None) -> dict[str, Any]:
    """``body`` (a Messages request) with ctxfold's prompt-cache breakpoints, and no others.

    Marked (``cache_control: {"type": "ephemeral", "ttl": ...}`` on the last cacheable block
    of each): the end of ``tools`` + ``system``, which change only when the host changes them;
    the checkpoint's summary message ``messages[checkpoint]``, which stays until the next
    checkpoint; both with ``ttl``. And the newest message, with ``5m``, so each request reads
    the previous one's prefix: a moving breakpoint is rewritten every turn, so the cheaper
    write wins, and "1h" entries must come before "5m" ones
    (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching). The API finds an
    earlier entry only within about 20 blocks of a breakpoint, so when the newest message is
    further than that from the previous breakpoint, a fourth (``5m``) bridges the gap
    (:func:`_bridge`). A breakpoint
    whose prefix is below ``min_tokens`` (``count`` gives the tokens of one tool, system
    block or message) is not placed — the API would not cache it anyway — nor is one that
    repeats the previous. Markers the host set are removed first, so there are never more
    than :data:`MAX_BREAKPOINTS`. Returns a new body; ``body`` is not changed.
    """
    if ttl not in ("5m", "1h"):
        raise MessageError(f"cache TTL {ttl!r}: Anthropic takes '5m' or '1h'")
    out = {k: _unmarked(v) if k in ("tools", "system", "messages") else v
           for k, v in body.items()}
    if isinstance(out.get("system"), str):
        out["system"] = [{"type": "text", "text": out["system"]}] if out["system"] else []
    tools: list[dict[str, Any]] = list(out.get("tools") or ())
    system: list[dict[str, Any]] = list(out.get("system") or ())
    messages: list[dict[str, Any]] = list(out.get("messages") or ())
    prefix = sum(count(t) for t in tools) + sum(count(b) for b in system)
    marks: list[tuple[list[dict[str, Any]], int, str]] = []
    if prefix >= min_tokens:
        if system:
            marks.append((system, len(system) - 1, ttl))
        elif tools:
            marks.append((tools, len(tools) - 1, ttl))
    # The first message whose prefix reaches the minimum: counted only that far (a long
    # history is not measured again on every request), since counts are never negative.
    reach, total = len(messages), prefix
    for j, message in enumerate(messages):
        total += count(message)
        if total >= min_tokens:
            reach = j
            break
    newest = len(messages) - 1
    bridge = _bridge(messages, checkpoint, newest)
    for index, mark_ttl in ((checkpoint, ttl), (bridge, "5m"), (newest, "5m")):
        if index is None or not 0 <= index < len(messages):
            continue
        if index < reach:
            continue
        if any(target is messages and at == index for target, at, _ in marks):
            continue
        marks.append((messages, index, mark_ttl))
    control = {"5m": {"type": "ephemeral", "ttl": "5m"}, "1h": {"type": "ephemeral",
                                                                "ttl": "1h"}}
    for target, at, mark_ttl in marks[:MAX_BREAKPOINTS]:
        if target is messages:
            marked = _marked_message(messages[at], control[mark_ttl])
            if marked is not None:
                messages[at] = marked
        else:
            target[at] = {**target[at], "cache_control": control[mark_ttl]}
    if tools:
        out["tools"] = tools
    if "system" in out:
        out["system"] = system
    if messages:
        out["messages"] = messages
    return out


def _bridge(messages: Sequence[dict[str, Any]], checkpoint: int | None,
            newest: int) -> int | None:
    """The message that bridges a long last turn, or ``None``: when more than
    :data:`LOOKBACK_BLOCKS` blocks lie between the previous breakpoint and the newest
    message, the earliest message within that reach of the newest. Its entry is what the
    next turn's newest breakpoint finds, and it finds the previous turn's entry itself, so
    a turn that added up to about twice the reach (many parallel tool calls) still reads."""
    start = checkpoint if checkpoint is not None and 0 <= checkpoint <= newest else -1
    blocks = [len(m["content"]) if isinstance(m.get("content"), list) else 1
              for m in messages]
    if sum(blocks[start + 1:newest + 1]) <= LOOKBACK_BLOCKS:
        return None
    behind = 0
    for j in range(newest - 1, start, -1):
        behind += blocks[j + 1]
        if behind > LOOKBACK_BLOCKS - 1:
            return j + 1 if j + 1 < newest else None
    return None


def _unmarked(value: Any) -> Any:
    """``value`` with every ``cache_control`` key of its blocks removed (copied)."""
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    if isinstance(value, dict):
        return {k: _unmarked(v) if k == "content" else v for k, v in value.items()
                if k != "cache_control"}
    return value


def _marked_message(message: dict[str, Any], control: dict[str, str]) -> dict[str, Any] | None:
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            return None  # an empty text block cannot carry a breakpoint
        return {**message, "content": [{"type": "text", "text": content,
                                        "cache_control": control}]}
    if not isinstance(content, list):
        return None
    for j in range(len(content) - 1, -1, -1):
        block = content[j]
        if (isinstance(block, dict) and block.get("type") not in UNCACHEABLE_BLOCKS
                and not (block.get("type") == "text" and not block.get("text"))):
            blocks = list(content)
            blocks[j] = {**block, "cache_control": control}
            return {**message, "content": blocks}
    return None
