"""The stable ``use_capability`` tool: one tool schema, many host capabilities (SPEC §3.7).

The model is offered exactly one extra tool, :data:`USE_CAPABILITY_TOOL`, whose name, schema
and position never change when capabilities are added, so the tool list (part of every
request prefix) stays byte-stable and cache-friendly. Capabilities are found with
``action="list"`` and invoked with ``action="call"``; each answers from the current session's
own transcript only, and its answer is appended as an ordinary tool result (history is never
rewritten).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxfold.capabilities import session_message, session_search, tool_result
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
        f"{PAGE_DEFAULT}, max {PAGE_MAX})}}."
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


def capability_list() -> dict[str, Any]:
    """What ``action="list"`` returns (built per call, so no caller can mutate it)."""
    return {"capabilities": [describe() for describe, _ in CAPABILITIES.values()]}


def handle_use_capability(messages: Sequence[Message], arguments: Any) -> str:
    """Answer one ``use_capability`` call; the returned text is the tool result.

    ``arguments`` are the call's arguments ``{"action", "capability_id", "arguments"}``,
    decoded or as the JSON string the model wrote (the inner ``arguments`` may be a JSON string
    too). They are model-controlled: errors are returned as text starting with ``"error: "``
    so the model can correct its call, and nothing raises for bad input — not a non-object,
    not invalid JSON, not a 5,000-digit number.
    """
    try:
        arguments = _object(arguments, "the use_capability arguments")
        action = arguments.get("action")
        if action == "list":
            return json.dumps(capability_list(), ensure_ascii=False, separators=(",", ":"))
        if action != "call":
            raise ToolResultError(
                f"unknown action {action!r} for use_capability; use action=\"list\" to see "
                "capabilities or action=\"call\" with capability_id and arguments"
            )
        capability_id = arguments.get("capability_id")
        if capability_id not in CAPABILITIES:
            raise ToolResultError(
                f"unknown capability_id {capability_id!r}; available: "
                f"{', '.join(CAPABILITIES)} (use action=\"list\" for details)"
            )
        inner = _object(arguments.get("arguments") or {}, f"arguments of {capability_id}")
        return CAPABILITIES[capability_id][1](messages, inner)
    except ToolResultError as exc:
        return f"error: {exc}"
    except (ValueError, TypeError, RecursionError) as exc:  # anything else the input tripped
        return f"error: invalid use_capability arguments ({type(exc).__name__}: {str(exc)[:200]})"


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
