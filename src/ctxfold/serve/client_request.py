"""What a client sent: a Chat Completions or Responses request body, read into ctxfold
values (the history as canonical messages, the tools as schemas) plus the fields the proxy
passes on untouched."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from ctxfold.capabilities.tool import USE_CAPABILITY_TOOL
from ctxfold.interop.coerce import to_messages, to_tools
from ctxfold.kernel.errors import MessageError
from ctxfold.kernel.types import Message, ToolSchema
from ctxfold.serve.errors import ServeError

Wire = Literal["chat", "responses"]

#: The body field that carries the history, per wire format.
HISTORY_FIELD: dict[Wire, str] = {"chat": "messages", "responses": "input"}
#: Fields the proxy owns: the history becomes the view, ``instructions`` joins the history
#: as its system message, ``model`` leads the body; everything else is passed on in order.
_OWNED = frozenset({"model", "messages", "input", "instructions"})
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


def parse_request(wire: Wire, body: Any) -> ClientRequest:
    """Read a client body; a :class:`ServeError` (HTTP 400) names what is wrong."""
    if not isinstance(body, Mapping):
        raise ServeError("the request body must be a JSON object")
    model = body.get("model", "")
    if not isinstance(model, str):
        raise ServeError("'model' must be a string", param="model")
    history = _history(wire, body)
    if not history:
        raise ServeError(f"'{HISTORY_FIELD[wire]}' must not be empty", param=HISTORY_FIELD[wire])
    raw_tools = body.get("tools") or []
    if not isinstance(raw_tools, list):
        raise ServeError("'tools' must be a list of tools", param="tools")
    tools, others = _tools(raw_tools)
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
    include_usage = wire == "responses" or (
        isinstance(options, Mapping) and bool(options.get("include_usage")))
    fields = {k: v for k, v in body.items() if k not in _OWNED}
    return ClientRequest(wire=wire, model=model, history=tuple(history), tools=tools,
                         stream=stream, include_usage=include_usage, fields=fields,
                         instructions=wire == "responses" and bool(body.get("instructions")),
                         other_tools=others)


def _tools(raw: list[Any]) -> tuple[tuple[ToolSchema, ...], tuple[Mapping[str, Any], ...]]:
    """The client's function tools as schemas, and its tools of other types (``custom``,
    ``web_search``, ``namespace``, …) as sent: the proxy passes those through without
    understanding them."""
    functions, others = [], []
    for i, tool in enumerate(raw):
        if not isinstance(tool, Mapping):
            raise ServeError(f"tools[{i}]: a tool must be an object", param="tools")
        if tool.get("type", "function") != "function":
            if not isinstance(tool.get("type"), str):
                raise ServeError(f"tools[{i}].type: must be a string", param="tools")
            others.append(tool)
            continue
        try:
            functions.append(to_tools([tool], where=f"tools[{i}]")[0])
        except MessageError as exc:
            raise ServeError(str(exc), param="tools") from None
    return tuple(functions), tuple(others)


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
