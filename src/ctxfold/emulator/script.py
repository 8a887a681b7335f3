"""Scripted, deterministic replies.

A script is a sequence of :class:`ReplySpec` (used in order; afterwards the default reply),
a :class:`RuleScript` (below) or a callable ``(request_body, profile) -> ReplySpec``. The CLI
reads a JSON file: a rule script, or a list of objects with ``text``, ``tool_calls``
(``[{"id", "name", "arguments"}]``; arguments may be an object), ``reasoning`` and
``finish_reason``.

Whatever the script says, a request whose last message is ctxfold's summary instruction
(``[ctxfold:summary-request]``) is answered with the extractive summary of its own messages,
so the ``llm`` summarizer path runs end to end over HTTP.

**Rule scripts.** A fixed list of replies is enough for a client whose requests come in a
known order. A real agent interleaves requests of its own (a title, a commit message, a
summary), calls tools whose names only it knows, and can be re-run from an earlier point; its
replies have to depend on the request. A rule script is an ordered list of rules; the first
rule whose ``when`` holds for a request answers it, with its replies in turn (cycled):

.. code-block:: json

    {"rules": [
      {"when": {"no_tools": true}, "reply": {"text": "A title"}},
      {"when": {"last": "user", "tools": ["bash"]},
       "reply": {"tool_calls": [{"name": "bash", "arguments": {"command": "seq {{turn}}"}}]}},
      {"when": {"last": "tool"}, "reply": {"text": "Done with turn {{turn}}."}}
    ]}

``when`` (every condition given must hold; an empty ``when`` always holds):

* ``last``: the role of the request's last message (``user``, ``tool``, ``assistant``,
  ``system``); a Responses ``function_call_output`` is a ``tool`` message.
* ``tools``: names of tools the request must all offer (function tools, also inside a
  Responses ``namespace``, and the names of ``custom`` tools).
* ``no_tools``: ``true``: the request offers no tool at all; ``false``: it offers one.
* ``contains``: a substring of the last message's text.
* ``first_user_contains`` / ``system_contains``: a substring of the first user message /
  of the system prompt (every system or developer message, Responses ``instructions``).
* ``turn_at_least`` / ``results_at_least``: at least this many user messages / tool results
  in the request.

In a reply's text and tool-call arguments, ``{{turn}}`` is the number of user messages in the
request (the same for every round of one turn, and the same when the turn is sent again),
``{{results}}`` the number of tool results in it (both depend only on the request, so a client
that re-runs a conversation gets the same replies again) and ``{{n}}`` the number of times this
rule has answered (from 1). A request that matches no rule
gets the default reply ``"OK."``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

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




_ROLES = ("user", "tool", "assistant", "system")
_WHEN_KEYS = ("last", "tools", "no_tools", "contains", "first_user_contains",
              "system_contains", "turn_at_least", "results_at_least")


@attrs.frozen(kw_only=True)
class When:
    """The conditions of one rule (see the module doc); ``None`` = not checked."""

    last: str | None = None
    tools: tuple[str, ...] = ()
    no_tools: bool | None = None
    contains: str | None = None
    first_user_contains: str | None = None
    system_contains: str | None = None
    turn_at_least: int | None = None
    results_at_least: int | None = None

    def holds(self, body: Mapping[str, Any], messages: Sequence[Message]) -> bool:
        """Whether every condition given holds for this request."""
        if self.last is not None and (not messages or messages[-1].role != self.last):
            return False
        if self.tools or self.no_tools is not None:
            offered = tool_names(body)
            if self.no_tools is not None and self.no_tools == bool(offered or body.get("tools")):
                return False
            if any(name not in offered for name in self.tools):
                return False
        if self.contains is not None and (
                not messages or self.contains not in _text(messages[-1])):
            return False
        if self.first_user_contains is not None:
            first = next((m for m in messages if m.role == "user"), None)
            if first is None or self.first_user_contains not in _text(first):
                return False
        if self.system_contains is not None:
            system = "\n".join(_text(m) for m in messages if m.role == "system")
            if self.system_contains not in system:
                return False
        if self.results_at_least is not None and tool_results(messages) < self.results_at_least:
            return False
        return self.turn_at_least is None or user_turns(messages) >= self.turn_at_least


@attrs.frozen
class Rule:
    """``when`` and the replies it gives, in turn."""

    when: When
    replies: tuple[ReplySpec, ...]


def _text(message: Message) -> str:
    """The text of a message, its text parts included."""
    if message.content:
        return message.content
    texts = []
    for raw in message.parts:
        part = json.loads(raw)
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "\n".join(texts)


def user_turns(messages: Sequence[Message]) -> int:
    """How many user messages the request holds (``{{turn}}``)."""
    return sum(1 for m in messages if m.role == "user")


def tool_results(messages: Sequence[Message]) -> int:
    """How many tool results the request holds (``{{results}}``)."""
    return sum(1 for m in messages if m.role == "tool")


def tool_names(body: Mapping[str, Any]) -> set[str]:
    """Names of the tools a Chat Completions or Responses request offers."""
    names: set[str] = set()
    stack = list(body.get("tools") or ())
    while stack:
        tool = stack.pop()
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.add(function["name"])
        elif tool.get("type") == "namespace":
            stack.extend(tool.get("tools") or ())
        elif isinstance(tool.get("name"), str):
            names.add(tool["name"])
    return names


class RuleScript:
    """A rule script (module doc): ``reply(body, messages)`` answers one request."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        self._counts = [0] * len(self.rules)
        self._lock = threading.Lock()

    def reply(self, body: Mapping[str, Any], messages: Sequence[Message]) -> ReplySpec:
        """The reply of the first rule that holds, placeholders filled in."""
        for index, rule in enumerate(self.rules):
            if not rule.when.holds(body, messages):
                continue
            with self._lock:
                self._counts[index] += 1
                count = self._counts[index]
            spec = rule.replies[(count - 1) % len(rule.replies)]
            return _fill(spec, {"{{turn}}": str(user_turns(messages)),
                                "{{results}}": str(tool_results(messages)), "{{n}}": str(count)})
        return ReplySpec()


def _fill(spec: ReplySpec, values: Mapping[str, str]) -> ReplySpec:
    def sub(text: str) -> str:
        for key, value in values.items():
            text = text.replace(key, value)
        return text

    calls = tuple(attrs.evolve(c, id=sub(c.id), arguments=sub(c.arguments))
                  for c in spec.tool_calls)
    return attrs.evolve(spec, text=sub(spec.text), tool_calls=calls)


def _when(data: Any, where: str) -> When:
    if data is None:
        return When()
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: 'when' must be an object")
    unknown = set(data) - set(_WHEN_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown condition(s) {sorted(unknown)}; allowed: "
                          f"{', '.join(_WHEN_KEYS)}")
    last = data.get("last")
    if last is not None and last not in _ROLES:
        raise ConfigError(f"{where}.last: {last!r} is not a role; allowed: {', '.join(_ROLES)}")
    tools = data.get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
        raise ConfigError(f"{where}.tools: must be a list of tool names")
    no_tools = data.get("no_tools")
    if no_tools is not None and not isinstance(no_tools, bool):
        raise ConfigError(f"{where}.no_tools: must be true or false")
    texts: dict[str, Any] = {}
    for key in ("contains", "first_user_contains", "system_contains"):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{where}.{key}: must be a string")
        texts[key] = value
    counts: dict[str, Any] = {}
    for key in ("turn_at_least", "results_at_least"):
        value = data.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 0):
            raise ConfigError(f"{where}.{key}: must be a whole number >= 0")
        counts[key] = value
    return When(last=last, tools=tuple(tools), no_tools=no_tools, **counts, **texts)


def rules_from_dict(data: Mapping[str, Any], where: str) -> RuleScript:
    """Build a :class:`RuleScript` from ``{"rules": [...]}`` (module doc)."""
    unknown = set(data) - {"rules"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; a rule script is "
                          "{\"rules\": [...]}")
    raw = data.get("rules")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}.rules: must be a non-empty list of rules")
    rules = []
    for i, item in enumerate(raw):
        at = f"{where}.rules[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{at}: each rule must be an object")
        extra = set(item) - {"when", "reply", "replies"}
        if extra:
            raise ConfigError(f"{at}: unknown key(s) {sorted(extra)}; allowed: when, reply, "
                              "replies")
        if ("reply" in item) == ("replies" in item):
            raise ConfigError(f"{at}: give exactly one of 'reply' or 'replies'")
        replies = [item["reply"]] if "reply" in item else item["replies"]
        if not isinstance(replies, list) or not replies:
            raise ConfigError(f"{at}.replies: must be a non-empty list of reply objects")
        specs = tuple(reply_from_dict(r, f"{at}.replies[{j}]") for j, r in enumerate(replies))
        rules.append(Rule(when=_when(item.get("when"), f"{at}.when"), replies=specs))
    return RuleScript(rules)


Script = Sequence[ReplySpec] | Callable[[Mapping[str, Any], "Profile"], ReplySpec] | RuleScript


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
        if isinstance(self._script, RuleScript):
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


def load_script(path: str | Path) -> list[ReplySpec] | RuleScript:
    """Read a JSON script file: a list of reply objects, or a rule script
    (``{"rules": [...]}``, see the module doc)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read emulator script {path}: {exc}; "
                          "expected a JSON list of reply objects") from None
    if isinstance(data, Mapping):
        return rules_from_dict(data, str(path))
    if not isinstance(data, list):
        raise ConfigError(f"{path}: the script must be a JSON list of reply objects or a "
                          "rule script {\"rules\": [...]}")
    return [reply_from_dict(item, f"{path}[{i}]") for i, item in enumerate(data)]
