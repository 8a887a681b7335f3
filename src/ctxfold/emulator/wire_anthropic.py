"""Anthropic Messages wire format: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

Read here on purpose without :mod:`ctxfold.interop.anthropic`: the emulator is what checks
ctxfold's own Anthropic conversion, and a check must not share code with what it checks.

What the real API does, and so the emulator (sources in ``docs/emulator.md``):

* Requests — the ``anthropic-version`` header (checked by the server), ``model`` and
  ``max_tokens`` are required
  (https://platform.claude.com/docs/en/api/messages); consecutive ``user`` or ``assistant``
  messages are combined into one turn (the ``messages`` field's doc in the official SDK), so
  roles need not alternate; a ``tool_result`` must answer a ``tool_use`` of the message just
  before it, and every ``tool_use`` followed by a message must be answered there; at most 4
  blocks carry ``cache_control`` (a top-level ``cache_control`` marks the last block and
  counts); a ``1h`` breakpoint may not follow a ``5m`` one.
* Errors — ``{"type": "error", "error": {"type", "message"}, "request_id"}`` with a
  ``request-id`` header (https://platform.claude.com/docs/en/api/errors); overflow is 400
  ``prompt is too long: N tokens > M maximum``, and a prompt that fits but leaves less than
  ``max_tokens`` is 400 ``input length and `max_tokens` exceed context limit: …``.
* Replies — the ``message`` object with ``text``, ``thinking`` (with a ``signature``) and
  ``tool_use`` (``toolu_…`` ids) blocks and ``usage`` split into ``input_tokens`` (after the
  last cache hit or write), ``cache_creation_input_tokens`` (per TTL in ``cache_creation``)
  and ``cache_read_input_tokens``; streamed as ``message_start``, ``ping``,
  ``content_block_start`` / ``content_block_delta`` (``text_delta``, ``input_json_delta`` in
  several fragments, ``thinking_delta`` then ``signature_delta``) / ``content_block_stop``,
  ``message_delta`` (``stop_reason`` and the final usage), ``message_stop``
  (https://platform.claude.com/docs/en/build-with-claude/streaming).

Tokens: the request is cut into *blocks* in prefix order — each tool, each system block, each
content block of each (combined) message, the first block of a message carrying its role —
and each block is tokenized on its own, so the cache can be accounted per block
(:meth:`ctxfold.emulator.cache.PrefixCache.account_marked`).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from ctxfold.emulator.cache import Mark, MarkedResult
from ctxfold.emulator.profiles import Profile
from ctxfold.emulator.script import ReplySpec
from ctxfold.emulator.wire_chat import WireError, pieces
from ctxfold.kernel.types import Message, ToolCall

MESSAGES_PATHS = ("/v1/messages", "/messages")
COUNT_PATHS = ("/v1/messages/count_tokens", "/messages/count_tokens")
#: The cache TTLs ``cache_control.ttl`` may name, in seconds.
TTLS = {"5m": 300.0, "1h": 3600.0}
MAX_MARKS = 4

#: The ``error.type`` of each HTTP status (https://platform.claude.com/docs/en/api/errors).
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}

_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
_ANTHROPIC_STOPS = ("end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn",
                    "refusal", "model_context_window_exceeded")


def error_body(status: int, message: str, *, err_type: str | None = None) -> dict[str, Any]:
    """Anthropic's error body for ``status`` (the server adds the request's ``request_id``
    to every error it answers)."""
    return {"type": "error", "error": {
        "type": err_type or ERROR_TYPES.get(status, "api_error"), "message": message}}


def _bad(message: str) -> WireError:
    return WireError(400, error_body(400, message))


@attrs.frozen
class Block:
    """One block of the prompt in prefix order: the text its tokens are counted from, and
    the TTL (seconds) of its ``cache_control`` mark, if any."""

    text: str
    ttl: float | None = None
    #: Where the block is in the request body (``messages.3.content.1``), for errors.
    where: str = ""


@attrs.frozen
class AnthropicRequest:
    """What the emulator acts on in a Messages request.

    ``messages``: the ctxfold view a script's rules read (system, user, assistant with tool
    calls and reasoning, a ``tool`` message per ``tool_result``).
    ``salts``: request settings that invalidate the cache from a block on
    (:func:`cache_settings`).
    """

    model: str
    stream: bool
    max_tokens: int
    blocks: tuple[Block, ...]
    messages: tuple[Message, ...]
    #: Settings mixed into the cache key at a block (:func:`cache_settings`).
    salts: Mapping[int, bytes] = attrs.field(factory=dict)

    @property
    def marks(self) -> tuple[Mark, ...]:
        return tuple(Mark(i, b.ttl) for i, b in enumerate(self.blocks) if b.ttl is not None)


def _canonical(block: Mapping[str, Any]) -> str:
    """A block's counted text: its JSON without ``cache_control`` (which is not content)."""
    return json.dumps({k: v for k, v in block.items() if k != "cache_control"},
                      ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _ttl(block: Any, where: str) -> float | None:
    if not isinstance(block, Mapping) or block.get("cache_control") is None:
        return None
    control = block["cache_control"]
    at = f"{where}.cache_control" if where else "cache_control"
    if not isinstance(control, Mapping) or control.get("type") != "ephemeral":
        raise _bad(f"{at}.type: Input should be 'ephemeral'")
    ttl = control.get("ttl", "5m")
    if ttl not in TTLS:
        raise _bad(f"{at}.ttl: Input should be '5m' or '1h'")
    return TTLS[str(ttl)]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content
                         if isinstance(b, Mapping) and b.get("type") == "text")
    return ""


@attrs.frozen
class _Turn:
    role: str
    #: (original message index, block index, block)
    blocks: tuple[tuple[int, int, Mapping[str, Any]], ...]


def _turns(raw: Any) -> list[_Turn]:
    if not isinstance(raw, list):
        raise _bad("messages: Input should be a valid list")
    if not raw:
        raise _bad("messages: at least one message is required")
    turns: list[_Turn] = []
    for i, message in enumerate(raw):
        if not isinstance(message, Mapping):
            raise _bad(f"messages.{i}: Input should be a valid dictionary")
        role = message.get("role")
        if role not in ("user", "assistant"):
            raise _bad(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        content = message.get("content")
        if isinstance(content, str):
            blocks: list[Mapping[str, Any]] = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            blocks = []
            for j, block in enumerate(content):
                if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
                    raise _bad(f"messages.{i}.content.{j}: each content block must be an "
                               "object with a 'type'")
                blocks.append(block)
        else:
            raise _bad(f"messages.{i}.content: Input should be a valid string or list")
        if not blocks and (i < len(raw) - 1 or role != "assistant"):
            raise _bad(f"messages.{i}: all messages must have non-empty content except for "
                       "the optional final assistant message")
        own = tuple((i, j, b) for j, b in enumerate(blocks))
        if turns and turns[-1].role == role:  # consecutive turns are combined
            turns[-1] = _Turn(role, turns[-1].blocks + own)
        else:
            turns.append(_Turn(str(role), own))
    return turns


def _check_tool_pairs(turns: Sequence[_Turn]) -> None:
    """Every ``tool_result`` answers a ``tool_use`` of the turn before; every ``tool_use``
    followed by a turn is answered there."""
    for t, turn in enumerate(turns):
        uses = [str(b.get("id")) for _, _, b in turn.blocks if b.get("type") == "tool_use"]
        if turn.role == "assistant" and uses and t + 1 < len(turns):
            answered = {str(b.get("tool_use_id")) for _, _, b in turns[t + 1].blocks
                        if b.get("type") == "tool_result"}
            missing = [u for u in uses if u not in answered]
            if missing:
                first = next(i for i, _, b in turn.blocks if b.get("type") == "tool_use"
                             and str(b.get("id")) == missing[0])
                raise _bad(f"messages.{first}: `tool_use` ids were found without "
                           f"`tool_result` blocks immediately after: {', '.join(missing)}. "
                           "Each `tool_use` block must have a corresponding `tool_result` "
                           "block in the next message.")
        if turn.role != "user":
            continue
        before = turns[t - 1] if t > 0 else None
        offered = {str(b.get("id")) for _, _, b in (before.blocks if before else ())
                   if b.get("type") == "tool_use"}
        for i, j, block in turn.blocks:
            if block.get("type") == "tool_result" and \
                    str(block.get("tool_use_id")) not in offered:
                raise _bad(f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                           f"`tool_result` blocks: {block.get('tool_use_id')}. Each "
                           "`tool_result` block must have a corresponding `tool_use` block "
                           "in the previous message.")


def _view(system: str, turns: Sequence[_Turn]) -> tuple[Message, ...]:
    """The ctxfold messages a script reads (rules: last role, tools, turn counts)."""
    out: list[Message] = [Message(role="system", content=system)] if system else []
    for turn in turns:
        blocks = [b for _, _, b in turn.blocks]
        if turn.role == "assistant":
            calls = tuple(ToolCall(id=str(b.get("id", "")), name=str(b.get("name", "")),
                                   arguments=json.dumps(b.get("input", {}),
                                                        ensure_ascii=False))
                          for b in blocks if b.get("type") == "tool_use")
            thinking = "".join(str(b.get("thinking", "")) for b in blocks
                               if b.get("type") == "thinking")
            out.append(Message(role="assistant", content=_text_of(blocks), tool_calls=calls,
                               reasoning_content=thinking or None))
            continue
        # One user message per message sent, although the API combines consecutive ones: a
        # summary instruction after a user message stays the last message a script reads.
        for sent in dict.fromkeys(i for i, _, _ in turn.blocks):
            own = [b for i, _, b in turn.blocks if i == sent]
            for b in own:
                if b.get("type") == "tool_result":
                    out.append(Message(role="tool", content=_text_of(b.get("content", "")),
                                       tool_call_id=str(b.get("tool_use_id", ""))))
            text = _text_of(own)
            if text or not any(b.get("type") == "tool_result" for b in own):
                out.append(Message(role="user", content=text))
    return tuple(out)


def parse_messages(profile: Profile, body: Mapping[str, Any], *,
                   count_only: bool = False) -> AnthropicRequest:
    """Validate and read a Messages body (``count_only``: a ``count_tokens`` body, which has
    no ``max_tokens``); raise :class:`WireError` as the API would."""
    if body.get("model") is None:
        raise _bad("model: Field required")
    max_tokens = body.get("max_tokens")
    if not count_only:
        if max_tokens is None:
            raise _bad("max_tokens: Field required")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0:
            raise _bad("max_tokens: Input should be a valid non-negative integer")
        if profile.max_output and max_tokens > profile.max_output:
            raise _bad(f"max_tokens: {max_tokens} > {profile.max_output}, which is the "
                       "maximum allowed number of output tokens for "
                       f"{body.get('model') or profile.model}")
    turns = _turns(body.get("messages"))
    if not count_only:
        _check_thinking(body, int(max_tokens or 0))
    blocks: list[Block] = []
    for i, tool in enumerate(body.get("tools") or ()):
        if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
            raise _bad(f"tools.{i}.name: Field required")
        if tool.get("type", "custom") == "custom" and not isinstance(
                tool.get("input_schema"), Mapping):
            raise _bad(f"tools.{i}.custom.input_schema: Field required")
        blocks.append(Block("[tool]" + _canonical(tool), _ttl(tool, f"tools.{i}"),
                            f"tools.{i}"))
    system = body.get("system")
    system_text = ""
    if isinstance(system, str):
        if system:
            blocks.append(Block("[system]" + system, None, "system"))
        system_text = system
    elif isinstance(system, list):
        for j, block in enumerate(system):
            if not isinstance(block, Mapping) or block.get("type") != "text":
                raise _bad(f"system.{j}: system blocks must be text blocks")
            _check_text(block, f"system.{j}", "system")
            blocks.append(Block(("[system]" if j == 0 else "") + str(block.get("text", "")),
                                _ttl(block, f"system.{j}"), f"system.{j}"))
        system_text = _text_of(system)
    elif system is not None:
        raise _bad("system: Input should be a valid string or list of text blocks")
    for t, turn in enumerate(turns):
        prefill = t == len(turns) - 1 and turn.role == "assistant"
        for k, (i, j, block) in enumerate(turn.blocks):
            if block.get("type") == "text" and not prefill:
                _check_text(block, f"messages.{i}.content.{j}", "messages")
            if block.get("type") in ("thinking", "redacted_thinking") and \
                    block.get("cache_control") is not None:
                raise _bad(f"messages.{i}.content.{j}.{block['type']}.cache_control: "
                           "Extra inputs are not permitted")
            text = block["text"] if block.get("type") == "text" and isinstance(
                block.get("text"), str) else _canonical(block)
            head = f"[{turn.role}]" if k == 0 else ""
            at = f"messages.{i}.content.{j}"
            blocks.append(Block(head + text, _ttl(block, at), at))
    # Top-level cache_control ("automatic caching") marks the last block and takes a slot.
    top = _ttl(body, "")
    found = sum(1 for b in blocks if b.ttl is not None) + (top is not None)
    if top is not None and blocks and blocks[-1].ttl is None:
        blocks[-1] = attrs.evolve(blocks[-1], ttl=top)
    if found > MAX_MARKS:
        raise _bad(f"A maximum of {MAX_MARKS} blocks with cache_control may be provided. "
                   f"Found {found}.")
    seen_short = False
    for block in blocks:
        if block.ttl is not None:
            if block.ttl > TTLS["5m"] and seen_short:
                raise _bad(f"{block.where}.cache_control.ttl: a ttl='1h' cache_control block "
                           "must not come after a ttl='5m' cache_control block. Note that "
                           "blocks are processed in the following order: `tools`, `system`, "
                           "`messages`.")
            seen_short = seen_short or block.ttl <= TTLS["5m"]
    _check_tool_pairs(turns)
    first_message = len(blocks) - sum(len(turn.blocks) for turn in turns)
    return AnthropicRequest(
        model=str(body.get("model") or profile.model), stream=bool(body.get("stream")),
        max_tokens=int(max_tokens or 0), blocks=tuple(blocks),
        messages=_view(system_text, turns),
        salts={first_message: cache_settings(body)})


def cache_settings(body: Mapping[str, Any]) -> bytes:
    """What invalidates the *messages* part of the cache without being prompt text: the
    ``tool_choice``, the thinking settings and whether the prompt holds images ("What
    invalidates the cache", https://platform.claude.com/docs/en/build-with-claude/prompt-caching).
    Tools and system entries are kept when these change; messages entries are not."""
    settings = {
        "tool_choice": body.get("tool_choice") or {"type": "auto"},
        "thinking": body.get("thinking") or {"type": "disabled"},
        "images": _has_image(body.get("messages")),
    }
    return json.dumps(settings, sort_keys=True).encode()


def _has_image(value: Any) -> bool:
    """Whether an ``image`` block is anywhere in ``value`` (also inside a tool result)."""
    if isinstance(value, Mapping):
        return value.get("type") == "image" or any(_has_image(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_image(v) for v in value)
    return False


def _check_text(block: Mapping[str, Any], where: str, field: str) -> None:
    """Empty and blank text blocks are refused (wording as quoted in
    anthropics/claude-code#59812, #23440, #62379)."""
    text = block.get("text")
    if not isinstance(text, str):
        raise _bad(f"{where}.text: Input should be a valid string")
    if not text and block.get("cache_control") is not None:
        raise _bad(f"{where}.text: cache_control cannot be set for empty text blocks")
    if not text:
        raise _bad(f"{field}: text content blocks must be non-empty")
    if not text.strip():
        raise _bad(f"{field}: text content blocks must contain non-whitespace text")


def _check_thinking(body: Mapping[str, Any], max_tokens: int) -> None:
    """``thinking.budget_tokens``: at least 1,024 and below ``max_tokens``
    (https://platform.claude.com/docs/en/build-with-claude/extended-thinking)."""
    thinking = body.get("thinking")
    if not isinstance(thinking, Mapping) or thinking.get("type") != "enabled":
        return
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < 1024:
        raise _bad("thinking.enabled.budget_tokens: Input should be greater than or equal to "
                   "1024")
    if max_tokens <= budget:
        raise _bad("`max_tokens` must be greater than `thinking.budget_tokens`")


def overflow_error(profile: Profile, prompt: int, max_tokens: int) -> WireError | None:
    """The rejection of a prompt that does not fit the window (``None`` when it fits)."""
    window = profile.window
    if prompt > window:
        return _bad(f"prompt is too long: {prompt} tokens > {window} maximum")
    if prompt + max_tokens > window:
        return _bad(f"input length and `max_tokens` exceed context limit: {prompt} + "
                    f"{max_tokens} > {window}, decrease input length or `max_tokens` and "
                    "try again")
    return None


# -- replies -----------------------------------------------------------------------------------

def signature(thinking: str) -> str:
    """A deterministic stand-in for the opaque signature of a thinking block."""
    return base64.b64encode(hashlib.sha256(thinking.encode()).digest()).decode()


def tool_use_id(message_id: str, index: int, call: ToolCall) -> str:
    """``toolu_…``: unique per reply and call."""
    digest = hashlib.sha256(f"{message_id}\0{index}\0{call.name}\0{call.arguments}".encode())
    return "toolu_01" + digest.hexdigest()[:22]


def _input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"arguments": arguments}  # a tool_use input is always an object
    return value if isinstance(value, dict) else {"arguments": value}


def content_blocks(reply: ReplySpec, message_id: str) -> list[dict[str, Any]]:
    """The reply's content blocks: thinking, text, tool_use — in that order."""
    out: list[dict[str, Any]] = []
    if reply.reasoning is not None:
        out.append({"type": "thinking", "thinking": reply.reasoning,
                    "signature": signature(reply.reasoning)})
    if reply.text or not reply.tool_calls:
        out.append({"type": "text", "text": reply.text})
    for i, call in enumerate(reply.tool_calls):
        out.append({"type": "tool_use", "id": call.id or tool_use_id(message_id, i, call),
                    "name": call.name, "input": _input(call.arguments)})
    return out


def output_text(blocks: Sequence[Mapping[str, Any]]) -> str:
    """The text the reply's output tokens are counted from."""
    return "".join(b["text"] if b["type"] == "text" else _canonical(b) for b in blocks)


def stop_reason(reply: ReplySpec) -> str:
    finish = reply.effective_finish_reason
    if finish in _ANTHROPIC_STOPS:
        return finish
    return _STOP_REASONS.get(finish, "end_turn")


def usage_dict(result: MarkedResult, output_tokens: int) -> dict[str, Any]:
    """``usage``: ``input_tokens`` is what was neither read from nor written to the cache."""
    short = result.written(TTLS["5m"])
    long = result.written() - short
    return {
        "input_tokens": result.uncached,
        "cache_creation_input_tokens": result.written(),
        "cache_read_input_tokens": result.read,
        "cache_creation": {"ephemeral_5m_input_tokens": short,
                           "ephemeral_1h_input_tokens": long},
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def message_object(parsed: AnthropicRequest, blocks: list[dict[str, Any]], reason: str | None,
                   usage: Mapping[str, Any], *, message_id: str) -> dict[str, Any]:
    """The ``message`` object (``reason`` ``None`` in ``message_start``)."""
    return {"id": message_id, "type": "message", "role": "assistant", "model": parsed.model,
            "content": blocks, "stop_reason": reason, "stop_sequence": None,
            "usage": dict(usage)}


def _event(kind: str, data: Mapping[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data}, ensure_ascii=False)}\n\n"


def message_stream(parsed: AnthropicRequest, blocks: list[dict[str, Any]], reason: str,
                   usage: Mapping[str, Any], *, message_id: str) -> Iterator[str]:
    """The SSE events of a streamed reply."""
    start_usage = {**usage, "output_tokens": 1}
    yield _event("message_start", {"message": message_object(parsed, [], None, start_usage,
                                                             message_id=message_id)})
    yield _event("ping", {})
    for index, block in enumerate(blocks):
        kind = block["type"]
        if kind == "text":
            opened: dict[str, Any] = {"type": "text", "text": ""}
        elif kind == "thinking":
            opened = {"type": "thinking", "thinking": "", "signature": ""}
        else:
            opened = {**block, "input": {}}
        yield _event("content_block_start", {"index": index, "content_block": opened})
        if kind == "text":
            for piece in pieces(block["text"]):
                yield _event("content_block_delta", {"index": index, "delta": {
                    "type": "text_delta", "text": piece}})
        elif kind == "thinking":
            for piece in pieces(block["thinking"]):
                yield _event("content_block_delta", {"index": index, "delta": {
                    "type": "thinking_delta", "thinking": piece}})
            yield _event("content_block_delta", {"index": index, "delta": {
                "type": "signature_delta", "signature": block["signature"]}})
        else:
            arguments = json.dumps(block["input"], ensure_ascii=False)
            for piece in [""] + [arguments[i:i + 12] for i in range(0, len(arguments), 12)]:
                yield _event("content_block_delta", {"index": index, "delta": {
                    "type": "input_json_delta", "partial_json": piece}})
        yield _event("content_block_stop", {"index": index})
    final = {k: v for k, v in usage.items() if k not in ("cache_creation", "service_tier")}
    yield _event("message_delta", {"delta": {"stop_reason": reason, "stop_sequence": None},
                                   "usage": final})
    yield _event("message_stop", {})


def error_event(err_type: str, message: str) -> str:
    """An ``event: error`` that ends a stream."""
    return _event("error", {"error": {"type": err_type, "message": message}})
