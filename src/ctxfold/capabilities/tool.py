"""The stable ``use_capability`` tool: one tool schema, many host capabilities (design §3.2).

The model is offered exactly one extra tool, :data:`USE_CAPABILITY_TOOL`, whose name, schema
and position never change between requests (a capability adds no tool; the description
names only those a model could not find otherwise, ``session:budget`` and ``session:fold``
among them), so the tool list (part of every request prefix) stays byte-stable and
cache-friendly. Capabilities are found with
``action="list"`` and invoked with ``action="call"``; each answers from the current session's
own transcript only (``session:budget`` and ``session:fold`` from its live engine, which a
fold changes the *view* of), and its answer is appended as an ordinary tool result (history
is never rewritten).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from ctxfold.capabilities import session_budget, session_message, session_search, tool_result
from ctxfold.capabilities.session_budget import SessionControl
from ctxfold.kernel.errors import ToolResultError
from ctxfold.kernel.types import Message, ToolSchema

PAGE_DEFAULT = tool_result.PAGE_DEFAULT
PAGE_MAX = tool_result.PAGE_MAX

USE_CAPABILITY_TOOL = ToolSchema(
    name="use_capability",
    description=(
        "Use a host capability. action=\"list\" returns every capability with its argument "
        "schema. action=\"call\" runs capability_id with arguments. Capability "
        "\"session:tool_result\" pages through the full text of a truncated tool result: "
        "arguments {\"tool_call_id\": str, \"result_ref\": str (from the truncation marker), "
        "\"offset\": int (UTF-8 byte offset, default 0), \"limit\": int (bytes, default "
        f"{PAGE_DEFAULT}, max {PAGE_MAX})}}. \"session:budget\" shows the context budget; "
        "\"session:fold\" folds old context at a task boundary."
    ),
    parameters={
        "type": "object",
        "properties": {
            "action": {
                "type": "string",
                "enum": ["list", "call"],
                "description": "\"list\" the capabilities, or \"call\" one of them.",
            },
            "capability_id": {
                "type": "string",
                "description": "The capability to call, e.g. \"session:tool_result\".",
            },
            "arguments": {
                "type": "object",
                "description": "Arguments of the capability (see action=\"list\").",
            },
        },
        "required": ["action"],
        "additionalProperties": False,
    },
)


#: Capability id -> (description for ``action="list"``, handler).
Handler = Callable[[Sequence[Message], Mapping[str, Any]], str]
CAPABILITIES: dict[str, tuple[Callable[[], dict[str, Any]], Handler]] = {
    tool_result.CAPABILITY_ID: (tool_result.describe, tool_result.call),
    session_search.CAPABILITY_ID: (session_search.describe, session_search.call),
    session_message.CAPABILITY_ID: (session_message.describe, session_message.call),
}
#: Capabilities of the live session (its budget, a fold): answered through the
#: :class:`~ctxfold.capabilities.session_budget.SessionControl` the engine passes. A handler
#: answers text, or — once the model's arguments are checked — the effect to run for the
#: answer, which runs outside :func:`answering`: its errors are not the model's input.
SessionHandler = Callable[[SessionControl, Mapping[str, Any]], str | Callable[[], str]]
T = TypeVar("T")
SESSION_CAPABILITIES: dict[str, tuple[Callable[[], dict[str, Any]], SessionHandler]] = {
    session_budget.BUDGET_ID: (session_budget.describe_budget, session_budget.call_budget),
    session_budget.FOLD_ID: (session_budget.describe_fold, session_budget.call_fold),
}


def capability_list() -> dict[str, Any]:
    """What ``action="list"`` returns (built per call, so no caller can mutate it)."""
    return {"capabilities": [describe() for describe, _ in
                             (*CAPABILITIES.values(), *SESSION_CAPABILITIES.values())]}


def parse_call(arguments: Any) -> tuple[str, Mapping[str, Any]] | None:
    """``(capability_id, its arguments)`` of an ``action="call"``, ``None`` for
    ``action="list"``; a :class:`ToolResultError` saying what is wrong with anything else."""
    arguments = _object(arguments, "the use_capability arguments")
    action = arguments.get("action")
    if action == "list":
        return None
    if action != "call":
        raise ToolResultError(
            f"unknown action {action!r} for use_capability; use action=\"list\" to see "
            "capabilities or action=\"call\" with capability_id and arguments"
        )
    capability_id = arguments.get("capability_id")
    if capability_id not in CAPABILITIES and capability_id not in SESSION_CAPABILITIES:
        raise ToolResultError(
            f"unknown capability_id {capability_id!r}; available: "
            f"{', '.join((*CAPABILITIES, *SESSION_CAPABILITIES))} (use action=\"list\" for "
            "details)"
        )
    return capability_id, _object(arguments.get("arguments") or {},
                                  f"arguments of {capability_id}")


def requested_capability(arguments: Any) -> str | None:
    """The capability a ``use_capability`` call asks for, ``None`` when it is a list or
    malformed (its answer then says what is wrong)."""
    try:
        parsed = parse_call(arguments)
    except (ToolResultError, ValueError, TypeError, RecursionError):
        return None
    return None if parsed is None else parsed[0]


def answering(run: Callable[[], T]) -> T | str:
    """``run()``'s answer, or the ``"error: "`` text of the model's bad input it tripped."""
    try:
        return run()
    except ToolResultError as exc:
        return f"error: {exc}"
    except (ValueError, TypeError, RecursionError) as exc:  # anything else the input tripped
        return f"error: invalid use_capability arguments ({type(exc).__name__}: {str(exc)[:200]})"


def handle_use_capability(messages: Sequence[Message], arguments: Any,
                          session: SessionControl | None = None) -> str:
    """Answer one ``use_capability`` call; the returned text is the tool result.

    ``arguments`` are the call's arguments ``{"action", "capability_id", "arguments"}``,
    decoded or as the JSON string the model wrote (the inner ``arguments`` may be a JSON string
    too). They are model-controlled: errors are returned as text starting with ``"error: "``
    so the model can correct its call, and nothing raises for bad input — not a non-object,
    not invalid JSON, not a 5,000-digit number. ``session`` answers ``session:budget`` and
    ``session:fold`` (without one, those answer an error).
    """
    def run() -> str | Callable[[], str]:
        parsed = parse_call(arguments)
        if parsed is None:
            return json.dumps(capability_list(), ensure_ascii=False, separators=(",", ":"))
        capability_id, inner = parsed
        if capability_id in CAPABILITIES:
            return CAPABILITIES[capability_id][1](messages, inner)
        if session is None:
            raise ToolResultError(f"{capability_id} needs a live session; answer it with "
                                  "ContextManager.use_capability")
        return SESSION_CAPABILITIES[capability_id][1](session, inner)

    answer = answering(run)
    return answer if isinstance(answer, str) else answer()


def with_capability_tool(tools: tuple[ToolSchema, ...]) -> tuple[ToolSchema, ...]:
    """``tools`` followed by :data:`USE_CAPABILITY_TOOL` — or ``tools`` itself (the same
    object) when the host already offers a tool of that name."""
    if any(t.name == USE_CAPABILITY_TOOL.name for t in tools):
        return tools
    return (*tools, USE_CAPABILITY_TOOL)


@attrs.frozen
class CapabilityCall:
    """A model's ``use_capability`` call, in the wire form it came in (``chat`` or
    ``responses``), so the answer goes back in the same form."""

    call_id: str
    arguments: Any
    form: str = "chat"

    def reply(self, text: str) -> dict[str, Any]:
        """The tool message that answers the call with ``text``, ready to append."""
        if self.form == "responses":
            return {"type": "function_call_output", "call_id": self.call_id, "output": text}
        return {"role": "tool", "tool_call_id": self.call_id, "content": text}


def capability_call(tool_call: Any) -> CapabilityCall | None:
    """``tool_call`` as a :class:`CapabilityCall` when it calls ``use_capability``, else
    ``None``. Takes a ctxfold :class:`~ctxfold.ToolCall`, a chat tool call (an OpenAI SDK
    object or its dict), a Responses ``function_call`` item (object or dict), or a
    ``{"name", "args", "id"}`` tool call (LangChain). A ``use_capability`` call without an
    id is a :class:`~ctxfold.MessageError`: its answer could not name it."""
    from ctxfold.kernel.errors import MessageError
    from ctxfold.kernel.types import ToolCall

    name: Any
    call_id: Any
    arguments: Any
    form: str
    if isinstance(tool_call, ToolCall):
        name, arguments, call_id, form = (tool_call.name, tool_call.arguments, tool_call.id,
                                          "chat")
    else:
        data = tool_call.model_dump() if hasattr(tool_call, "model_dump") else tool_call
        if not isinstance(data, Mapping):
            raise MessageError(f"answer(): a tool call must be a ToolCall, a chat tool call "
                               f"or a Responses function_call item, got "
                               f"{type(tool_call).__name__}")
        function = data.get("function")
        if data.get("type") == "function_call":
            name, arguments, call_id, form = (data.get("name"), data.get("arguments"),
                                              data.get("call_id"), "responses")
        elif isinstance(function, Mapping):
            name, arguments, call_id, form = (function.get("name"), function.get("arguments"),
                                              data.get("id"), "chat")
        else:
            name, call_id, form = data.get("name"), data.get("id"), "chat"
            arguments = data.get("arguments", data.get("args"))
    if name != USE_CAPABILITY_TOOL.name:
        return None
    if not isinstance(call_id, str) or not call_id:
        raise MessageError("answer(): the use_capability call has no id, so no answer could "
                           "name it; pass the tool call as the model returned it")
    return CapabilityCall(call_id=call_id, arguments=arguments if arguments is not None else {},
                          form=form)


def _object(value: Any, what: str) -> Mapping[str, Any]:
    """``value`` as a JSON object: decoded when it is a JSON string."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError) as exc:
            raise ToolResultError(f"{what} are not valid JSON ({str(exc)[:120]}); pass an "
                                  "object") from None
    if not isinstance(value, Mapping):
        raise ToolResultError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value
