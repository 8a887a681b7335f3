"""Scripted, deterministic replies.

A script is a sequence of :class:`ReplySpec` (used in order; afterwards the default reply),
a rule script (:class:`~ctxfold.emulator.rules.RuleScript`) or a callable
``(request_body, profile) -> ReplySpec``. The CLI reads a JSON file: a rule script, or a list
of objects with ``text``, ``tool_calls`` (``[{"id", "name", "arguments"}]``; arguments may be
an object), ``reasoning`` and ``finish_reason``.

Whatever the script says, a request whose last message is ctxfold's summary instruction
(``[ctxfold:summary-request]``) is answered with the extractive summary of its own messages,
so the ``llm`` summarizer path runs end to end over HTTP.

Rule scripts (replies chosen by what the request looks like) are
:mod:`ctxfold.emulator.rules`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from ctxfold.kernel.errors import ConfigError
from ctxfold.kernel.types import Message, ToolCall

if TYPE_CHECKING:
    from ctxfold.emulator.profiles import Profile

DEFAULT_TEXT = "OK."


@attrs.frozen
class ReplySpec:
    """One reply. ``finish_reason`` ``None`` → ``tool_calls`` when there are calls, else
    ``stop``. Tool calls without an id get a deterministic ``call_00_…`` id."""

    text: str = DEFAULT_TEXT
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str | None = None
    finish_reason: str | None = None

    @property
    def effective_finish_reason(self) -> str:
        if self.finish_reason:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"

    def message(self) -> Message:
        """The assistant message this reply stands for (as a client would replay it)."""
        calls = tuple(
            c if c.id else attrs.evolve(c, id=_call_id(i, c)) for i, c in enumerate(self.tool_calls)
        )
        return Message(role="assistant", content=self.text, tool_calls=calls,
                       reasoning_content=self.reasoning)


def _call_id(index: int, call: ToolCall) -> str:
    digest = hashlib.sha256(f"{call.name}\0{call.arguments}".encode()).hexdigest()[:24]
    return f"call_{index:02d}_{digest}"




@runtime_checkable
class Responder(Protocol):
    """A script that answers each request from the request itself (a rule script)."""

    def reply(self, body: Mapping[str, Any], messages: Sequence[Message]) -> ReplySpec:
        """The reply for one request."""
        ...


Script = Sequence[ReplySpec] | Callable[[Mapping[str, Any], "Profile"], ReplySpec] | Responder


class ScriptRunner:
    """Hands out replies in order, thread-safely."""

    def __init__(self, script: Script | None) -> None:
        self._script = script
        self._next = 0
        self._lock = threading.Lock()

    def reply(self, body: Mapping[str, Any], profile: Profile,
              messages: Sequence[Message]) -> ReplySpec:
        """The reply for one accepted request (summary requests get a summary)."""
        summary = summary_reply(messages, body)
        if summary is not None:
            return summary
        if isinstance(self._script, Responder):
            return self._script.reply(body, messages)
        if callable(self._script):
            return self._script(body, profile)
        with self._lock:
            index = self._next
            self._next += 1
        if self._script is not None and index < len(self._script):
            return self._script[index]
        return ReplySpec()


def summary_reply(messages: Sequence[Message], body: Mapping[str, Any]) -> ReplySpec | None:
    """The extractive summary when ``messages`` is a ctxfold summary request, else ``None``;
    as long as the instruction asks (a model writes about the length it is asked for).

    Imported lazily: the summary modules are optional at emulator import time.
    """
    if not messages or "[ctxfold:summary-request]" not in messages[-1].content:
        return None
    try:
        from ctxfold.kernel.summary import is_summary_request, requested_length
        from ctxfold.kernel.types import SummaryRequest
        from ctxfold.plugins.summarizers.extractive import ExtractiveSummarizer
    except ImportError:  # pragma: no cover - only while the summary modules are missing
        return None
    if not is_summary_request(messages):
        return None
    cap = body.get("max_tokens") or body.get("max_completion_tokens") \
        or body.get("max_output_tokens") or 8192
    result = ExtractiveSummarizer().summarize(
        SummaryRequest(messages=tuple(messages), tools=(), max_tokens=int(cap),
                       target_tokens=requested_length(messages[-1].content))
    )
    return ReplySpec(text=result.text, finish_reason=result.finish_reason)


def reply_from_dict(data: Mapping[str, Any], where: str) -> ReplySpec:
    """Build a :class:`ReplySpec` from one JSON script entry."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: each script entry must be an object")
    unknown = set(data) - {"text", "tool_calls", "reasoning", "finish_reason"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: text, "
                          "tool_calls, reasoning, finish_reason")
    calls = []
    for i, call in enumerate(data.get("tool_calls") or ()):
        if not isinstance(call, Mapping) or not call.get("name"):
            raise ConfigError(f"{where}.tool_calls[{i}]: needs at least a 'name'")
        args = call.get("arguments", "")
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
        calls.append(ToolCall(id=str(call.get("id", "")), name=str(call["name"]), arguments=args))
    text = data.get("text", "" if calls else DEFAULT_TEXT)
    reasoning = data.get("reasoning")
    finish = data.get("finish_reason")
    return ReplySpec(text=str(text), tool_calls=tuple(calls),
                     reasoning=None if reasoning is None else str(reasoning),
                     finish_reason=None if finish is None else str(finish))
