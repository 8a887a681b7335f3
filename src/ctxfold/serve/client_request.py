"""What a client sent: a Chat Completions, Responses or Anthropic Messages request body, read
into ctxfold values (the history as canonical messages, the tools as schemas) plus the fields
the proxy passes on untouched."""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Mapping
from typing import Any, Literal

import attrs

from ctxfold.capabilities.tool import USE_CAPABILITY_TOOL
from ctxfold.interop.anthropic import from_anthropic, tool_from_anthropic
from ctxfold.interop.chat import message_from_openai
from ctxfold.interop.coerce import to_messages, to_tools
from ctxfold.kernel.errors import MessageError
from ctxfold.kernel.types import Message, ToolSchema
from ctxfold.serve.errors import ServeError
from ctxfold.serve.sessions import key_digest, link

Wire = Literal["chat", "responses", "messages"]

#: The body field that carries the history, per wire format.
HISTORY_FIELD: dict[Wire, str] = {"chat": "messages", "responses": "input",
                                  "messages": "messages"}
#: Fields the proxy owns: the history becomes the view, ``instructions`` (Responses) and
#: ``system`` (Anthropic) join the history as its system message, ``model`` leads the body;
#: everything else is passed on in order.
_OWNED = frozenset({"model", "messages", "input", "instructions", "system"})
#: Responses features that need state on the provider's side, which the proxy replaces.
_SERVER_STATE = ("previous_response_id", "conversation")


@attrs.frozen
class ClientRequest:
    """One client request. ``history`` is the client's whole history as messages (a
    Responses ``instructions`` string first, as the system message); ``fields`` are the
    other body fields in the client's order (``tools`` and ``stream`` included), which the
    upstream body keeps."""

    wire: Wire
    model: str
    history: tuple[Message, ...]
    tools: tuple[ToolSchema, ...]
    stream: bool
    include_usage: bool
    fields: Mapping[str, Any]
    #: Responses: the history starts with the ``instructions`` as its system message.
    instructions: bool = False
    #: The client's tools of types other than ``function``, as sent.
    other_tools: tuple[Mapping[str, Any], ...] = ()
    #: The history's key digests and their hash chain (:mod:`ctxfold.serve.sessions`) when
    #: reading it computed them (empty: the router computes them).
    digests: tuple[bytes, ...] = ()
    chain: tuple[bytes, ...] = ()
    #: Request headers an upstream of the client's own format must see (Anthropic's
    #: ``anthropic-version`` and ``anthropic-beta``).
    headers: Mapping[str, str] = attrs.field(factory=dict)
    #: Per message of ``history``, the index in the client's history field of the message
    #: it was read from (an Anthropic message with tool results reads into several; ``-1``
    #: for Anthropic's ``system`` field), so a refusal names the client's own message; empty
    #: when the history was not read message by message.
    origins: tuple[int, ...] = ()


@attrs.frozen
class _Read:
    wire: Wire
    raw: list[Any]
    #: ``ends[i]``: how many messages ``raw[:i + 1]`` read into (an Anthropic message with
    #: tool results is several).
    ends: tuple[int, ...]
    messages: tuple[Message, ...]
    digests: tuple[bytes, ...]
    chain: tuple[bytes, ...]


def _chat_entry(raw: Any, i: int, field: str) -> list[Message]:
    return [message_from_openai(raw, where=f"{field}[{i}]")]


def _anthropic_entry(raw: Any, i: int, _field: str) -> list[Message]:
    """Entry 0 is ``{"system": …}``, entry ``i`` the message ``messages[i - 1]``."""
    if i == 0:
        return from_anthropic(raw["system"], [])
    if _is_system(raw):
        return [_system_message(raw, i - 1)]
    return from_anthropic(None, [raw], where="messages")


def _is_system(raw: Any) -> bool:
    return isinstance(raw, Mapping) and raw.get("role") == "system"


def _system_message(raw: Mapping[str, Any], index: int) -> Message:
    """A mid-conversation system message (``{"role": "system", "content": text or text
    blocks}``, https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages;
    Claude Code sends one after the first user message) as a system message of the
    history."""
    try:
        return from_anthropic(raw.get("content"), [])[0]
    except (MessageError, IndexError) as exc:
        raise MessageError(f"messages[{index}].content: a system message takes a string or "
                           f"text blocks ({exc})") from None


def _anthropic_history(system: Any, raw: list[Any]) -> list[Message]:
    """``from_anthropic`` of a history that may hold mid-conversation system messages
    (which it does not read): each stands in as a placeholder user message, then replaced,
    so every other message is read — and named in an error — at its own index."""
    tag = uuid.uuid4().hex
    placeholders = {f"ctxfold-system-{tag}-{i}": _system_message(m, i)
                    for i, m in enumerate(raw) if _is_system(m)}
    if not placeholders:
        return from_anthropic(system, raw)
    marks = iter(placeholders)
    stand_in = [{"role": "user", "content": next(marks)} if _is_system(m) else m for m in raw]
    return [placeholders.get(m.content, m) if m.role == "user" and not m.parts else m
            for m in from_anthropic(system, stand_in)]


class RecentHistories:
    """The chat and Anthropic histories read last, one per conversation (the newest), at
    most ``capacity`` of them: a request that resends one of them is read from its
    first message that differs, since a message dict equal to the one at the same place last
    time (compared as parsed JSON) is the same message, already converted and hashed. An
    agent's next request is its last one plus the answer and what it did, so a turn costs
    O(new messages) of conversion and hashing instead of O(history). (An Anthropic client
    that moves its ``cache_control`` marks re-reads the few messages whose marks moved.)"""

    def __init__(self, capacity: int = 32) -> None:
        self.capacity = capacity
        self._reads: deque[_Read] = deque(maxlen=capacity)

    def read(self, raw: list[Any], field: str, wire: Wire = "chat") -> _Read | None:
        """``raw`` (chat message dicts; on Anthropic's wire ``{"system": …}`` and then the
        messages) read, or ``None`` when it holds anything but plain chat messages
        (Responses items group into messages: read the usual way)."""
        if wire == "chat" and not all(isinstance(d, Mapping)
                                      and not isinstance(d.get("type"), str) for d in raw):
            return None
        convert = _anthropic_entry if wire == "messages" else _chat_entry
        best, shared = None, 0
        for earlier in self._reads:
            if earlier.wire != wire:
                continue
            n, limit = 0, min(len(earlier.raw), len(raw))
            while n < limit and earlier.raw[n] == raw[n]:
                n += 1
            if n > shared:
                best, shared = earlier, n
        count = best.ends[shared - 1] if best and shared else 0
        ends = list(best.ends[:shared]) if best else []
        messages = list(best.messages[:count]) if best else []
        digests = list(best.digests[:count]) if best else []
        chain = list(best.chain[:count]) if best else []
        for i in range(shared, len(raw)):
            for message in convert(raw[i], i, field):
                digest = key_digest(message)
                messages.append(message)
                digests.append(digest)
                chain.append(link(chain[-1] if chain else b"", digest))
            ends.append(len(messages))
        read = _Read(wire, raw, tuple(ends), tuple(messages), tuple(digests), tuple(chain))
        if best is not None:
            self._reads.remove(best)  # this conversation's newest history stands for it
        self._reads.append(read)
        return read


def parse_request(wire: Wire, body: Any,
                  recent: RecentHistories | None = None) -> ClientRequest:
    """Read a client body; a :class:`ServeError` (HTTP 400) names what is wrong. With
    ``recent``, a chat history is read only from where it differs from one read before."""
    if not isinstance(body, Mapping):
        raise ServeError("the request body must be a JSON object")
    model = body.get("model", "")
    if not isinstance(model, str):
        raise ServeError("'model' must be a string", param="model")
    read = None
    if recent is not None and wire == "chat" and isinstance(body.get("messages"), list):
        try:
            read = recent.read(body["messages"], "messages")
        except MessageError as exc:
            raise ServeError(str(exc), param="messages") from None
    elif recent is not None and wire == "messages" and body.get("messages") \
            and isinstance(body["messages"], list):
        try:
            read = recent.read([{"system": body.get("system")}, *body["messages"]],
                               "messages", "messages")
        except MessageError:
            read = None  # read whole below, for the error that names the place
    history = list(read.messages) if read is not None else _history(wire, body)
    if not history:
        raise ServeError(f"'{HISTORY_FIELD[wire]}' must not be empty", param=HISTORY_FIELD[wire])
    raw_tools = body.get("tools") or []
    if not isinstance(raw_tools, list):
        raise ServeError("'tools' must be a list of tools", param="tools")
    tools, others = _tools(raw_tools, wire)
    if any(t.name == USE_CAPABILITY_TOOL.name for t in tools):
        raise ServeError(f"the tool name {USE_CAPABILITY_TOOL.name!r} is reserved: ctxfold "
                         "serve offers and answers that tool itself; rename the client's tool",
                         param="tools")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ServeError("'stream' must be true or false", param="stream")
    if wire == "chat" and body.get("n") not in (None, 1):
        raise ServeError("'n' must be 1: ctxfold serve keeps one transcript per session",
                         param="n")
    options = body.get("stream_options")
    include_usage = wire != "chat" or (
        isinstance(options, Mapping) and bool(options.get("include_usage")))
    fields = {k: v for k, v in body.items() if k not in _OWNED}
    return ClientRequest(wire=wire, model=model, history=tuple(history), tools=tools,
                         stream=stream, include_usage=include_usage, fields=fields,
                         instructions=_leads_with_system(wire, body),
                         other_tools=others, digests=read.digests if read else (),
                         chain=read.chain if read else (),
                         origins=_origins(read.ends, wire) if read else ())


def _origins(ends: tuple[int, ...], wire: Wire) -> tuple[int, ...]:
    """:attr:`ClientRequest.origins` of a read whose entry ``i`` read into the messages up
    to ``ends[i]`` (on Anthropic's wire entry 0 is the ``system`` field)."""
    first = -1 if wire == "messages" else 0
    out: list[int] = []
    for i, end in enumerate(ends):
        out += [first + i] * (end - len(out))
    return tuple(out)


def _tools(raw: list[Any], wire: Wire
           ) -> tuple[tuple[ToolSchema, ...], tuple[Mapping[str, Any], ...]]:
    """The client's function tools as schemas, and its tools of other types (``custom``,
    ``web_search``, ``namespace``, …) as sent: the proxy passes those through without
    understanding them. On Anthropic's wire the client tools (``name``, ``description``,
    ``input_schema``; no ``type`` or ``custom``) are the functions, the server tools
    (``web_search_…``, ``bash_…``, …) the others
    (https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/overview)."""
    anthropic = wire == "messages"
    function_types = (None, "custom") if anthropic else ("function",)
    functions, others = [], []
    for i, tool in enumerate(raw):
        where = f"tools[{i}]"
        if not isinstance(tool, Mapping):
            raise ServeError(f"{where}: a tool must be an object", param="tools")
        if tool.get("type", None if anthropic else "function") not in function_types:
            if not isinstance(tool.get("type"), str):
                raise ServeError(f"{where}.type: must be a string", param="tools")
            others.append(tool)
            continue
        try:
            functions.append(tool_from_anthropic(tool, where=where) if anthropic
                             else to_tools([tool], where=where)[0])
        except MessageError as exc:
            raise ServeError(str(exc), param="tools") from None
    return tuple(functions), tuple(others)


def _leads_with_system(wire: Wire, body: Mapping[str, Any]) -> bool:
    """Whether the history starts with a system message made of a field of the body."""
    if wire == "responses":
        return bool(body.get("instructions"))
    return wire == "messages" and bool(body.get("system"))


def estimated_tools(request: ClientRequest) -> tuple[ToolSchema, ...]:
    """What the session's estimate counts as the request's tools: the function tools, and
    each tool of another type as a stand-in of its size (its JSON as the parameters)."""
    stand_ins = tuple(ToolSchema(name=str(t.get("name") or t["type"]),
                                 parameters={k: v for k, v in t.items() if k != "name"})
                      for t in request.other_tools)
    return request.tools + stand_ins


def _history(wire: Wire, body: Mapping[str, Any]) -> list[Message]:
    field = HISTORY_FIELD[wire]
    raw = body.get(field)
    if wire == "messages":
        if not isinstance(raw, list) or not raw:
            raise ServeError("'messages' must be a list of at least one message",
                             param="messages")
        try:
            return _anthropic_history(body.get("system"), raw)
        except MessageError as exc:
            raise ServeError(str(exc), param="messages") from None
    head: list[Message] = []
    if wire == "responses":
        for name in _SERVER_STATE:
            if body.get(name) is not None:
                raise ServeError(
                    f"'{name}' is not supported: ctxfold serve keeps the history itself; "
                    "send the whole history in 'input' (with store=false)", param=name)
        instructions = body.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise ServeError("'instructions' must be a string", param="instructions")
        if instructions:
            head.append(Message(role="system", content=instructions))
        if isinstance(raw, str):
            return [*head, Message(role="user", content=raw)]
    if not isinstance(raw, list):
        raise ServeError(f"'{field}' must be a list", param=field)
    try:
        return [*head, *to_messages(raw, where=field)]
    except MessageError as exc:
        raise ServeError(str(exc), param=field) from None
