"""OpenAI Responses wire format (providers.md §3.1, §3.3–§3.5, §0.4, §0.5).

Input items become :class:`~ctxfold.kernel.types.Message` s (``instructions`` → system,
a stored response named by ``previous_response_id`` → the messages before the input,
``message`` items by role, ``function_call`` → a tool call on the assistant message,
``function_call_output`` → a tool message; reasoning items are opaque and ignored). Usage sits
in ``response.usage`` and, when streaming, only in the terminal ``response.completed`` /
``response.incomplete`` event; there is no ``[DONE]``. Overflow: 400 ``context_length_exceeded``,
or an in-stream ``error`` event (sequence number 2) when streaming.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ctxfold.emulator.profiles import Profile
from ctxfold.emulator.script import ReplySpec
from ctxfold.emulator.wire_chat import Accounting, ParsedRequest, WireError, pieces
from ctxfold.interop.chat import tool_schema_from_openai
from ctxfold.kernel.types import Message, ToolCall

#: ``previous(response_id)``: the conversation a stored response ended with, or ``None``.
Previous = Callable[[str], "tuple[Message, ...] | None"]

OVERFLOW = {
    "type": "invalid_request_error",
    "code": "context_length_exceeded",
    "message": "Your input exceeds the context window of this model. Please adjust your input "
               "and try again.",
    "param": "input",
}


def _bad(message: str, param: str) -> WireError:
    return WireError(400, {"error": {"message": message, "type": "invalid_request_error",
                                     "param": param, "code": None}})


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content
                         if isinstance(p, Mapping) and "text" in p)
    raise _bad(f"{where}: content must be a string or a list of content parts", where)


def _messages(body: Mapping[str, Any]) -> list[Message]:
    out: list[Message] = []
    items = body.get("input")
    if isinstance(items, str):
        return [Message(role="user", content=items)]
    if not isinstance(items, list):
        raise _bad("input must be a string or a list of input items", "input")
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, Mapping):
            raise _bad(f"{where}: expected an object", where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise _bad(f"{where}: unknown role {role!r}", where)
            out.append(Message(role="system" if role == "developer" else role,
                               content=_text(item.get("content"), where)))
        elif kind == "function_call":
            call = ToolCall(id=str(item.get("call_id", "")), name=str(item.get("name", "")),
                            arguments=str(item.get("arguments", "")))
            last = out[-1] if out else None
            if last is not None and last.role == "assistant":
                out[-1] = Message(role="assistant", content=last.content,
                                  tool_calls=(*last.tool_calls, call))
            else:
                out.append(Message(role="assistant", content="", tool_calls=(call,)))
        elif kind == "function_call_output":
            out.append(Message(role="tool", content=_text(item.get("output"), where),
                               tool_call_id=str(item.get("call_id", ""))))
        # reasoning, compaction and other opaque items carry no text the emulator can count.
    return out


def parse_responses(profile: Profile, body: Mapping[str, Any],
                    previous: Previous | None = None) -> ParsedRequest:
    """Validate and read a ``POST /responses`` body. ``previous(id)`` is the conversation
    a stored response ended with (``None``: unknown), for ``previous_response_id``: it comes
    before this request's input; the previous ``instructions`` are not carried over."""
    if body.get("conversation") is not None:
        raise _bad("the emulator keeps no conversations: chain with previous_response_id "
                   "or send the whole history in input", "conversation")
    earlier: tuple[Message, ...] = ()
    previous_id = body.get("previous_response_id")
    if previous_id is not None:
        found = previous(str(previous_id)) if previous is not None else None
        if found is None:
            raise WireError(400, {"error": {
                "message": f"Previous response with id '{previous_id}' not found.",
                "type": "invalid_request_error", "param": "previous_response_id",
                "code": "previous_response_not_found"}})
        earlier = tuple(found)
    new = _messages(body)
    if not new:
        raise _bad("input must not be empty", "input")
    conversation = (*earlier, *new)
    instructions = body.get("instructions")
    head = (Message(role="system", content=str(instructions)),) if instructions else ()
    messages = (*head, *conversation)
    tools = tuple(tool_schema_from_openai(t) for t in body.get("tools") or ()
                  if isinstance(t, Mapping) and t.get("type", "function") == "function")
    max_output = body.get("max_output_tokens")
    if max_output is not None and (not isinstance(max_output, int) or max_output < 16):
        raise _bad(f"max_output_tokens must be an integer >= 16, got {max_output!r}",
                   "max_output_tokens")
    key = body.get("prompt_cache_key")
    return ParsedRequest(
        messages=tuple(messages), tools=tools, model=str(body.get("model") or profile.model),
        stream=bool(body.get("stream", False)), include_usage=True, max_output=max_output,
        cache_scope="", prompt_cache_key=None if key is None else str(key),
        conversation=conversation, echo=_echo(body),
    )


def _echo(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request fields the real response object repeats, with the API's defaults."""
    return {
        "instructions": body.get("instructions"),
        "previous_response_id": body.get("previous_response_id"),
        "tools": list(body.get("tools") or []),
        "tool_choice": body.get("tool_choice", "auto"),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "text": body.get("text") or {"format": {"type": "text"}},
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "truncation": body.get("truncation", "disabled"),
        "metadata": body.get("metadata") or {},
        "user": body.get("user"),
    }


def cache_scope(parsed: ParsedRequest, ids: list[int]) -> str:
    """``prompt_cache_key`` when given, else a hash of the first 256 tokens (routing)."""
    if parsed.prompt_cache_key is not None:
        return "key:" + parsed.prompt_cache_key
    head = ",".join(str(i) for i in ids[:256])
    return "head:" + hashlib.sha256(head.encode()).hexdigest()[:16]


def usage_dict(acc: Accounting) -> dict[str, Any]:
    """``response.usage`` (providers.md §3.4)."""
    return {
        "input_tokens": acc.prompt,
        "input_tokens_details": {"cached_tokens": acc.hit},
        "output_tokens": acc.completion,
        "output_tokens_details": {"reasoning_tokens": acc.reasoning},
        "total_tokens": acc.prompt + acc.completion,
    }


def _items(reply: ReplySpec, response_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.reasoning is not None:
        items.append({"id": f"rs_{response_id}", "type": "reasoning",
                      "summary": [{"type": "summary_text", "text": reply.reasoning}]})
    if reply.text or not reply.tool_calls:
        items.append({"id": f"msg_{response_id}", "type": "message", "status": "completed",
                      "role": "assistant",
                      "content": [{"type": "output_text", "text": reply.text,
                                   "annotations": []}]})
    for i, call in enumerate(reply.message().tool_calls):
        items.append({"id": f"fc_{response_id}_{i}", "type": "function_call",
                      "status": "completed", "call_id": call.id, "name": call.name,
                      "arguments": call.arguments})
    return items


def response_object(parsed: ParsedRequest, reply: ReplySpec, acc: Accounting | None, *,
                    response_id: str, created: int, status: str = "completed",
                    with_output: bool = True) -> dict[str, Any]:
    """The ``response`` object (``status`` ``incomplete`` when cut by the output budget)."""
    incomplete = reply.effective_finish_reason == "length"
    if status == "completed" and incomplete:
        status = "incomplete"
    return {
        "id": f"resp_{response_id}", "object": "response", "created_at": created,
        "status": status, "model": parsed.model, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"}
        if status == "incomplete" else None,
        "max_output_tokens": parsed.max_output, "prompt_cache_key": parsed.prompt_cache_key,
        **parsed.echo,
        "output": _items(reply, response_id) if with_output else [],
        "usage": usage_dict(acc) if acc is not None else None,
    }


def _event(kind: str, seq: int, payload: dict[str, Any]) -> str:
    data = {"type": kind, "sequence_number": seq, **payload}
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def responses_stream(parsed: ParsedRequest, reply: ReplySpec, acc: Accounting, *,
                     response_id: str, created: int) -> Iterator[str]:
    """The SSE events of a streamed response, ending with the terminal event."""
    seq = 0

    def event(kind: str, payload: dict[str, Any]) -> str:
        nonlocal seq
        text = _event(kind, seq, payload)
        seq += 1
        return text

    shell = response_object(parsed, reply, None, response_id=response_id, created=created,
                            status="in_progress", with_output=False)
    yield event("response.created", {"response": shell})
    yield event("response.in_progress", {"response": shell})
    for index, item in enumerate(_items(reply, response_id)):
        opened = {**item, "status": "in_progress"}
        if item["type"] == "message":
            opened["content"] = []
        elif item["type"] == "function_call":
            opened["arguments"] = ""  # as the real API: the arguments come as deltas
        yield event("response.output_item.added", {"output_index": index, "item": opened})
        if item["type"] == "message":
            part = {"type": "output_text", "text": "", "annotations": []}
            yield event("response.content_part.added", {"item_id": item["id"],
                        "output_index": index, "content_index": 0, "part": part})
            for piece in pieces(reply.text):
                yield event("response.output_text.delta", {"item_id": item["id"],
                            "output_index": index, "content_index": 0, "delta": piece,
                            "logprobs": []})
            yield event("response.output_text.done", {"item_id": item["id"],
                        "output_index": index, "content_index": 0, "text": reply.text,
                        "logprobs": []})
            yield event("response.content_part.done", {"item_id": item["id"],
                        "output_index": index, "content_index": 0,
                        "part": item["content"][0]})
        elif item["type"] == "function_call":
            for piece in pieces(item["arguments"], 32):
                yield event("response.function_call_arguments.delta",
                            {"item_id": item["id"], "output_index": index, "delta": piece})
            yield event("response.function_call_arguments.done",
                        {"item_id": item["id"], "output_index": index,
                         "arguments": item["arguments"]})
        yield event("response.output_item.done", {"output_index": index, "item": item})
    final = response_object(parsed, reply, acc, response_id=response_id, created=created)
    terminal = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    yield event(terminal, {"response": final})


def overflow_stream(parsed: ParsedRequest, *, response_id: str, created: int) -> Iterator[str]:
    """A streamed overflow: created, in_progress, then the ``error`` event (sequence 2)."""
    shell = response_object(parsed, ReplySpec(), None, response_id=response_id,
                            created=created, status="in_progress", with_output=False)
    yield _event("response.created", 0, {"response": shell})
    yield _event("response.in_progress", 1, {"response": shell})
    yield _event("error", 2, {"error": dict(OVERFLOW)})


def overflow_error() -> WireError:
    """The non-streaming overflow rejection."""
    return WireError(400, {"error": dict(OVERFLOW)})
