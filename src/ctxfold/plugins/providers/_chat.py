"""Shared OpenAI chat-completions translation for the ``deepseek`` and ``mimo`` plugins.

Not a plugin itself. Subclasses of :class:`ChatCompletionsTranslator` only add their output
budget and thinking fields; message shape, tool schemas, stream assembly and usage mapping
are common (providers.md §0.3–0.5, §1.3–1.8, §2.3–2.5).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxfold.interop.chat import tool_schema_to_openai
from ctxfold.interop.parts import CHAT_PARTS
from ctxfold.interop.parts import chat_messages as wire_messages
from ctxfold.interop.usage import chat_usage
from ctxfold.kernel.types import ChatRequest, ChatResponse, Message, ToolCall
from ctxfold.message_checks import repaired_message
from ctxfold.transport.errors import bad_payload, error_from_payload, load_json, stream_cut


def chat_messages(messages: Sequence[Message], part_types: frozenset[str] = CHAT_PARTS,
                  target: str = "chat completions") -> list[dict[str, Any]]:
    """Provider-visible chat messages (:func:`ctxfold.interop.parts.chat_messages`: parts
    in their chat form, a part type outside ``part_types`` an error naming it).
    ``reasoning_content`` is replayed only on assistant turns that made tool calls: DeepSeek
    and MiMo reject a thinking-mode request whose tool-call turns lack it, and ignore it
    elsewhere (DeepSeek's thinking-mode guide,
    https://api-docs.deepseek.com/guides/thinking_mode), so sending it elsewhere would only
    cost tokens."""
    out = wire_messages(messages, part_types=part_types, target=target)
    visible = [m for m in messages if not m.local_only]
    for message, item in zip(visible, out, strict=True):
        if message.role != "assistant" or not message.tool_calls:
            item.pop("reasoning_content", None)
    return out


class ChatCompletionsTranslator:
    """``POST {base}/chat/completions`` with SSE streaming and usage requested."""

    name = "chat"
    path = "/chat/completions"
    #: The chat content-part types the endpoint accepts; any other is refused, naming it.
    part_types: frozenset[str] = CHAT_PARTS

    def budget_fields(self, request: ChatRequest) -> dict[str, Any]:
        """Output-budget fields (provider specific)."""
        return {}

    def thinking_fields(self, request: ChatRequest) -> dict[str, Any]:
        """Reasoning/thinking fields (provider specific)."""
        return {}

    def build_body(self, request: ChatRequest, *, model: str) -> dict[str, Any]:
        """Messages first, so turn n+1's bytes extend turn n's up to the end of the list."""
        body: dict[str, Any] = {"model": model,
                                "messages": chat_messages(request.messages, self.part_types,
                                                          f"provider {self.name!r}")}
        if request.tools:
            body["tools"] = [tool_schema_to_openai(t) for t in request.tools]
        body.update(self.budget_fields(request))
        body.update(self.thinking_fields(request))
        body["stream"] = request.stream
        if request.stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def parse_response(self, data: Any, request_id: str) -> ChatResponse:
        """Parse a non-streaming ``chat.completion`` object."""
        if isinstance(data, Mapping) and data.get("error"):
            raise error_from_payload(self.name, data, "the response reported an error")
        try:
            choice = data["choices"][0]
            raw = choice["message"]
            assert isinstance(raw, Mapping)
        except (KeyError, IndexError, TypeError, AssertionError):
            raise bad_payload(self.name, "the chat.completion response", str(data)) from None
        calls = tuple(
            ToolCall(id=str(c.get("id") or f"call_{i}"), name=str(c["function"].get("name", "")),
                     arguments=_args(c["function"].get("arguments")))
            for i, c in enumerate(raw.get("tool_calls") or ())
            if isinstance(c, Mapping) and isinstance(c.get("function"), Mapping)
        )
        message = repaired_message(Message(
            role="assistant", content=str(raw.get("content") or ""), tool_calls=calls,
            reasoning_content=raw.get("reasoning_content") or None))
        return ChatResponse(message=message,
                            finish_reason=str(choice.get("finish_reason") or "stop"),
                            usage=chat_usage(data.get("usage")),
                            request_id=request_id or str(data.get("id") or ""))

    def new_stream(self) -> ChatStream:
        """A fresh assembler."""
        return ChatStream(self.name)


class ChatStream:
    """Assembles ``chat.completion.chunk`` events.

    Usage is taken from the last chunk that carries a non-null ``usage``, wherever it is:
    DeepSeek puts it on the finish chunk, OpenAI on a trailing ``choices: []`` chunk, MiMo
    possibly after the finish chunk — so reading continues to ``[DONE]`` (providers.md §4).
    Tool-call fragments are keyed by their ``index``.
    """

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.response_id = ""
        self.done = False

    def feed(self, event: Any) -> bool:
        """Consume one SSE event; True at ``[DONE]``."""
        data = event.data.strip()
        if data == "[DONE]":
            self.done = True
            return True
        if not data:
            return False
        chunk = load_json(self.provider, "a stream chunk", data)
        if not isinstance(chunk, Mapping):
            raise bad_payload(self.provider, "a stream chunk", data)
        if chunk.get("error"):
            raise error_from_payload(self.provider, chunk, "the stream reported an error")
        self.response_id = self.response_id or str(chunk.get("id") or "")
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise bad_payload(self.provider, "a stream chunk", data)
        for choice in choices:
            if isinstance(choice, Mapping) and choice.get("index", 0) == 0:
                self._choice(choice, data)
        return False

    def _choice(self, choice: Mapping[str, Any], data: str) -> None:
        delta = choice.get("delta") or {}
        if not isinstance(delta, Mapping):
            raise bad_payload(self.provider, "a stream chunk", data)
        if delta.get("content"):
            self.content.append(str(delta["content"]))
        if delta.get("reasoning_content"):
            self.reasoning.append(str(delta["reasoning_content"]))
        for position, frag in enumerate(delta.get("tool_calls") or ()):
            if not isinstance(frag, Mapping):
                raise bad_payload(self.provider, "a tool-call fragment", data)
            index = frag.get("index", position)
            slot = self.calls.setdefault(int(index), {"id": "", "name": "", "arguments": []})
            if frag.get("id"):
                slot["id"] = str(frag["id"])
            fn = frag.get("function") or {}
            if fn.get("name"):
                slot["name"] = str(fn["name"])
            if fn.get("arguments"):
                slot["arguments"].append(_args(fn["arguments"]))
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])

    def _message(self, partial: bool) -> Message:
        calls = tuple(
            ToolCall(id=slot["id"] or f"call_{self.response_id}_{index}", name=slot["name"],
                     arguments="".join(slot["arguments"]))
            for index, slot in sorted(self.calls.items())
        )
        # Joined here, not per chunk: an escaped surrogate pair split across two chunks only
        # becomes one character once both halves are in the same string.
        return repaired_message(Message(
            role="assistant", content="".join(self.content), tool_calls=calls,
            reasoning_content="".join(self.reasoning) or None, partial=partial))

    def partial(self) -> Message | None:
        """What arrived so far, marked partial."""
        if not (self.content or self.reasoning or self.calls):
            return None
        return self._message(partial=True)

    def finish(self, request_id: str) -> ChatResponse:
        """The full response; a stream that stopped before both ``finish_reason`` and
        ``[DONE]`` was cut off."""
        if not self.done and self.finish_reason is None:
            raise stream_cut(self.provider, "its finish chunk and [DONE]")
        reason = self.finish_reason or ("tool_calls" if self.calls else "stop")
        return ChatResponse(message=self._message(partial=False), finish_reason=reason,
                            usage=chat_usage(self.usage),
                            request_id=request_id or self.response_id)


def _args(value: Any) -> str:
    if isinstance(value, str):
        return value
    import json

    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
