"""Rule scripts: replies chosen by what the request looks like.

A fixed list of replies is enough for a client whose requests come in a
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
* ``found_at_least``: ``[REGEX, N]``, the number ``{{match:REGEX}}`` would give is at least N
  (a count that survives a proxy's folding, see below).

In a reply's text and tool-call arguments, ``{{turn}}`` is the number of user messages in the
request (the same for every round of one turn, and the same when the turn is sent again),
``{{results}}`` the number of tool results in it (both depend only on the request, so a client
that re-runs a conversation gets the same replies again) and ``{{n}}`` the number of times this
rule has answered (from 1). Those counts are of the request, which a proxy in front of the
emulator makes smaller when it folds a checkpoint; a number that must survive folding comes
from the newest messages instead: ``{{match:REGEX}}`` is the first group of ``REGEX`` in the
newest message it matches (text or tool-call arguments; ``0`` when none does) and
``{{next:REGEX}}`` that number plus one (``1`` when none) — e.g. ``{{match:Turn (\\d+)}}``
for a turn number the client writes in its own message. A request that matches no rule
gets the default reply ``"OK."``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ctxfold.emulator.script import ReplySpec, reply_from_dict
from ctxfold.kernel.errors import ConfigError
from ctxfold.kernel.types import Message

_ROLES = ("user", "tool", "assistant", "system")
_WHEN_KEYS = ("last", "tools", "no_tools", "contains", "first_user_contains",
              "system_contains", "turn_at_least", "results_at_least", "found_at_least")


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
    #: ``[REGEX, N]``: the number ``{{match:REGEX}}`` finds is at least N.
    found_at_least: tuple[str, int] | None = None

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
        if self.found_at_least is not None and (
                found_number(messages, self.found_at_least[0]) or 0) < self.found_at_least[1]:
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
            return _fill(spec, messages, {"{{turn}}": str(user_turns(messages)),
                                          "{{results}}": str(tool_results(messages)),
                                          "{{n}}": str(count)})
        return ReplySpec()


#: ``{{match:REGEX}}`` / ``{{next:REGEX}}`` (module doc).
_FOUND = re.compile(r"\{\{(match|next):(.+?)\}\}")


def found_number(messages: Sequence[Message], pattern: str) -> int | None:
    """The first group of ``pattern`` in the newest message whose text (or tool-call
    arguments) it matches, as an integer."""
    regex = re.compile(pattern)
    for message in reversed(messages):
        texts = [_text(message), *(c.arguments for c in message.tool_calls)]
        for text in texts:
            hit = regex.search(text)
            if hit is not None:
                try:
                    return int(hit.group(1) if hit.groups() else hit.group(0))
                except ValueError:
                    return None
    return None


def _fill(spec: ReplySpec, messages: Sequence[Message],
          values: Mapping[str, str]) -> ReplySpec:
    def found(hit: re.Match[str]) -> str:
        number = found_number(messages, hit.group(2))
        if hit.group(1) == "next":
            return str(1 + (number or 0))
        return str(number if number is not None else 0)

    def sub(text: str) -> str:
        for key, value in values.items():
            text = text.replace(key, value)
        return _FOUND.sub(found, text)

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
    found = data.get("found_at_least")
    if found is not None:
        if not (isinstance(found, list) and len(found) == 2 and isinstance(found[0], str)
                and isinstance(found[1], int) and not isinstance(found[1], bool)):
            raise ConfigError(f"{where}.found_at_least: must be [REGEX, whole number]")
        try:
            re.compile(found[0])
        except re.error as exc:
            raise ConfigError(f"{where}.found_at_least: bad regex: {exc}") from None
        found = (found[0], found[1])
    return When(last=last, tools=tuple(tools), no_tools=no_tools, found_at_least=found,
                **counts, **texts)


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
