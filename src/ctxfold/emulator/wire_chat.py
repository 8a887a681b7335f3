"""Chat Completions wire format, DeepSeek and MiMo flavours (providers.md §0.3–§0.5, §1.3–§1.8,
§2.5, §2.7).

Differences the profile decides:

* usage — DeepSeek: ``prompt_cache_hit_tokens`` / ``prompt_cache_miss_tokens`` plus
  ``prompt_tokens_details.cached_tokens`` (the same number); MiMo: only
  ``prompt_tokens_details.cached_tokens``, and ``prompt_tokens_details`` is ``null`` when
  nothing was cached (the doc example).
* usage in a stream — DeepSeek: on the last chunk (the one with ``finish_reason``), always;
  with ``stream_options.include_usage`` every other chunk carries ``"usage": null``. MiMo: a
  usage chunk with ``choices: []`` *after* the finish chunk, before ``[DONE]``.
* the output budget field — DeepSeek ``max_tokens``; MiMo ``max_completion_tokens``.
* errors — DeepSeek: OpenAI envelope ``{"error": {message, type, param, code}}``; MiMo: the
  observed flat ``{"code": "400", "message", "param", "type": ""}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from ctxfold.emulator.profiles import Profile
from ctxfold.emulator.script import ReplySpec
from ctxfold.interop.chat import message_from_openai, tool_schema_from_openai
from ctxfold.kernel.errors import CtxfoldError, MessageError
from ctxfold.kernel.types import Message, ToolSchema


class WireError(CtxfoldError):
    """A request the provider would reject: HTTP ``status`` with JSON ``body``.

    Internal to the emulator (it becomes an HTTP response, never reaches a ctxfold user).
    """

    def __init__(self, status: int, body: Mapping[str, Any]) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body


@attrs.frozen
class Accounting:
    """Token numbers of one answered request."""

    prompt: int
    hit: int
    completion: int
    reasoning: int

    @property
    def miss(self) -> int:
        return self.prompt - self.hit


@attrs.frozen
class ParsedRequest:
    """The parts of a request body the emulator acts on (any wire format)."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...]
    model: str
    stream: bool
    include_usage: bool
    max_output: int | None
    cache_scope: str
    prompt_cache_key: str | None = None
    #: Responses: the history without ``instructions`` (what a stored response keeps) and
    #: the request fields the response object repeats.
    conversation: tuple[Message, ...] = ()
    echo: Mapping[str, Any] = attrs.field(factory=dict)


def error_body(profile: Profile, status: int, message: str, *, err_type: str,
               code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """The provider's error body for ``status``."""
    if profile.usage_style == "mimo":
        return {"code": str(status), "message": message, "param": param or "", "type": ""}
    return {"error": {"message": message, "type": err_type, "param": param,
                      "code": code if code is not None else err_type}}


def parse_chat(profile: Profile, body: Mapping[str, Any]) -> ParsedRequest:
    """Validate and read a chat-completions body; raise :class:`WireError` like the provider."""
    def bad(message: str, param: str | None = None) -> WireError:
        text = message if profile.usage_style != "mimo" else f"Param Incorrect: {message}"
        return WireError(400, error_body(profile, 400, text, err_type="invalid_request_error",
                                         param=param))

    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise bad("messages must be a non-empty list of message objects", "messages")
    try:
        messages = tuple(message_from_openai(m, where=f"messages[{i}]", lossless=False)
                         for i, m in enumerate(raw_messages))
        tools = tuple(tool_schema_from_openai(t) for t in body.get("tools") or ())
    except (MessageError, AttributeError, TypeError) as exc:
        raise bad(f"Invalid Format: {exc}", "messages") from None
    stream = bool(body.get("stream", False))
    options = body.get("stream_options")
    if options is not None and not stream and profile.usage_style == "deepseek":
        # providers.md §0.5: stream_options without stream:true is a 400 on DeepSeek.
        raise bad("stream_options should be set along with stream = true", "stream_options")
    include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
    # Each profile's own field first, the other as a fallback: OpenAI-SDK based clients
    # (the Agents SDK, LiteLLM) send max_completion_tokens to DeepSeek too (docs/emulator.md).
    field, other = (("max_completion_tokens", "max_tokens") if profile.usage_style == "mimo"
                    else ("max_tokens", "max_completion_tokens"))
    max_output = body.get(field)
    if max_output is None and body.get(other) is not None:
        field, max_output = other, body.get(other)
    if max_output is not None and (not isinstance(max_output, int) or max_output < 1):
        raise bad(f"{field} must be a positive integer, got {max_output!r}", field)
    return ParsedRequest(
        messages=messages, tools=tools, model=str(body.get("model") or profile.model),
        stream=stream, include_usage=include_usage, max_output=max_output,
        cache_scope=str(body.get("user_id") or ""),  # user_id isolates KV cache (§1.3)
    )


def overflow_error(profile: Profile, prompt: int, completion: int) -> WireError:
    """The context-overflow rejection (providers.md §0.4)."""
    window = profile.window
    if profile.usage_style == "mimo":
        # No verbatim MiMo overflow body is known: the observed flat 400 shape, with the
        # numbers in the OpenAI-compatible wording MiMo's API follows elsewhere, so the
        # provider's generic parser is what the emulator exercises.
        message = (f"Param Incorrect: This model's maximum context length is {window} tokens. "
                   f"However, you requested {prompt + completion} tokens ({prompt} in the "
                   f"messages, {completion} in the completion).")
        return WireError(400, {"code": "400", "message": message, "param": "messages",
                               "type": ""})
    message = (f"This model's maximum context length is {window} tokens. However, you "
               f"requested {prompt + completion} tokens ({prompt} in the messages, {completion} "
               "in the completion). Please reduce the length of the messages or completion.")
    return WireError(400, error_body(profile, 400, message, err_type="invalid_request_error"))


def usage_dict(profile: Profile, acc: Accounting) -> dict[str, Any]:
    """The ``usage`` object exactly as the provider reports it."""
    if profile.usage_style == "mimo":
        return {
            "completion_tokens": acc.completion,
            "prompt_tokens": acc.prompt,
            "total_tokens": acc.prompt + acc.completion,
            "completion_tokens_details": {"reasoning_tokens": acc.reasoning},
            "prompt_tokens_details": {"cached_tokens": acc.hit} if acc.hit else None,
        }
    return {
        "prompt_tokens": acc.prompt,
        "completion_tokens": acc.completion,
        "total_tokens": acc.prompt + acc.completion,
        "prompt_tokens_details": {"cached_tokens": acc.hit},
        "prompt_cache_hit_tokens": acc.hit,
        "prompt_cache_miss_tokens": acc.miss,
        "completion_tokens_details": {"reasoning_tokens": acc.reasoning},
    }


def _wire_calls(reply: ReplySpec) -> list[dict[str, Any]]:
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in reply.message().tool_calls
    ]


def chat_response(profile: Profile, parsed: ParsedRequest, reply: ReplySpec, acc: Accounting,
                  *, response_id: str, created: int) -> dict[str, Any]:
    """The non-streaming ``chat.completion`` object."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.reasoning is not None:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = _wire_calls(reply)
    return {
        "id": response_id, "object": "chat.completion", "created": created,
        "model": parsed.model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": reply.effective_finish_reason}],
        "usage": usage_dict(profile, acc),
        "system_fingerprint": "fp_ctxfold_emulator",
    }


def pieces(text: str, size: int = 24) -> list[str]:
    """Deterministic stream pieces of ``text`` (whole words, about ``size`` chars each)."""
    out: list[str] = []
    current = ""
    for word in re.findall(r"\s*\S+\s*|\s+", text):
        if current and len(current) + len(word) > size:
            out.append(current)
            current = ""
        current += word
    if current:
        out.append(current)
    return out


def chat_stream(profile: Profile, parsed: ParsedRequest, reply: ReplySpec, acc: Accounting,
                *, response_id: str, created: int) -> Iterator[str]:
    """The SSE events (``data: …\\n\\n`` strings) of a streamed reply, ending in ``[DONE]``."""
    deepseek = profile.usage_style == "deepseek"
    null_usage = parsed.include_usage or not deepseek

    def chunk(delta: dict[str, Any], finish: str | None = None,
              usage: Any = None, with_usage: bool = null_usage) -> str:
        data: dict[str, Any] = {
            "id": response_id, "object": "chat.completion.chunk", "created": created,
            "model": parsed.model, "system_fingerprint": "fp_ctxfold_emulator",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if with_usage or usage is not None:
            data["usage"] = usage
        return "data: " + json.dumps(data, ensure_ascii=False) + "\n\n"

    first: dict[str, Any] = {"role": "assistant", "content": ""}
    if reply.reasoning is not None:
        first["reasoning_content"] = ""
    yield chunk(first)
    for piece in pieces(reply.reasoning or ""):
        yield chunk({"reasoning_content": piece})
    for piece in pieces(reply.text):
        yield chunk({"content": piece})
    for index, call in enumerate(_wire_calls(reply)):
        head = {"index": index, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""}}
        yield chunk({"tool_calls": [head]})
        for piece in pieces(call["function"]["arguments"], 32):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    usage = usage_dict(profile, acc)
    finish = reply.effective_finish_reason
    if deepseek:
        yield chunk({"content": "", "role": None}, finish, usage=usage)
    else:
        yield chunk({}, finish)
        tail = {"id": response_id, "object": "chat.completion.chunk", "created": created,
                "model": parsed.model, "choices": [], "usage": usage}
        yield "data: " + json.dumps(tail, ensure_ascii=False) + "\n\n"
    yield "data: [DONE]\n\n"
