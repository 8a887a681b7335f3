"""Fidelity the engine is not graded on: continuation facts, far facts and needles.

The engine's summary check repairs what its own probes (:mod:`ctxfold.engine.probes`) find
lost, so a score built from those probes is partly guaranteed for ctxfold. This module is the
replay's headline measure instead. It shares no code with the probes or the check (an
import-linter contract in ``pyproject.toml`` forbids the engine, the kernel and the plugins to
import it, and it imports none of them but the kernel's value types — and, for the *needles
with search* upper bound only, the model-facing ``session:search`` capability it measures):

* **Facts** are tokens of five kinds, drawn with this module's own patterns: file paths (a
  ``/`` between name characters), identifiers (``snake_case``, ``CamelCase``, dotted names
  such as ``mod.func`` or ``setup.py``), numbers of 3+ digits, error names (``XxxError``,
  ``XxxException``) and quoted strings (4–80 characters between ``"``, ``'`` or backticks).
* A **continuation fact** of request *r* (the request that produced recorded assistant
  message *m*) is a fact the real agent wrote — in the text or the tool-call arguments of an
  assistant message at or after *m* — that had already appeared (as a fact of the same
  patterns, in any message but the system prompt) before *m*. The agent needed it again, so
  a request that lets it continue should still carry it. The request *carries* a fact when
  its text (any message's content or tool-call arguments; reasoning is not sent) contains
  it, exactly.
* A **far fact** is a continuation fact not mentioned in the 20 messages before *m*: what
  only a summary (or history search) can still bring back.
* A **needle** is a continuation fact that appeared in exactly one message before *m*
  (typically one tool output): the hardest to keep by summarizing.
* **Needles via search** (an upper bound): for a policy whose requests offer ctxfold's
  history search (the ``use_capability`` tool), a needle the request lost still counts when
  ``session:search`` with the needle as its query, over the transcript before *m*, returns a
  message holding it (which ``session:message`` reads in full). It assumes the model knows to
  search for that exact text, which is why it is an upper bound.

Retention is pooled: carried (request, fact) pairs over due pairs, over all requests of a
policy, and again over the requests from its first maintenance on (``after first fold``).
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable, Sequence

import attrs

from ctxfold.kernel.types import Message

#: Messages before the request inside which a fact is "near"; outside, it is far.
NEAR_MESSAGES = 20

_PATH = re.compile(r"(?<![\w/.~-])(?:~|\.{1,2})?/?(?:[\w@+.-]+/)+[\w@+.-]+")
_SNAKE = re.compile(r"\b[A-Za-z_][A-Za-z0-9]*_[A-Za-z0-9_]+\b")
_CAMEL = re.compile(r"\b[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*\b")
_DOTTED = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b")
_NUMBER = re.compile(r"(?<![\w.])\d{3,}(?![\w])")
_ERROR_NAME = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b")
_QUOTED = re.compile(r"\"([^\"\n]{4,80})\"|'([^'\n]{4,80})'|`([^`\n]{4,80})`")


def facts_in(text: str) -> dict[str, str]:
    """The facts of ``text``: fact text → kind (a text several patterns find keeps the first:
    path, error, identifier, number, quoted)."""
    found: dict[str, str] = {}

    def add(token: str, kind: str) -> None:
        token = token.strip().rstrip(".,:;")
        if len(token) >= 4 and token not in found:
            found[token] = kind

    for m in _PATH.finditer(text):
        if re.search(r"[A-Za-z]", m.group(0)) and not m.group(0).startswith("//"):
            add(m.group(0), "path")
    for m in _ERROR_NAME.finditer(text):
        add(m.group(0), "error")
    for pattern in (_SNAKE, _CAMEL, _DOTTED):
        for m in pattern.finditer(text):
            add(m.group(0), "identifier")
    for m in _NUMBER.finditer(text):
        add(m.group(0), "number")
    for m in _QUOTED.finditer(text):
        quoted = next(g for g in m.groups() if g)
        if quoted.strip() and not quoted.isspace():
            add(quoted, "quoted")
    return found


def _argument_strings(arguments: str) -> list[str]:
    try:
        data = json.loads(arguments) if arguments else {}
    except ValueError:
        return [arguments]
    out: list[str] = []
    stack: list[object] = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return out


def written_text(message: Message) -> str:
    """What the agent wrote in ``message`` and a request sends of it: the content and the
    tool calls' arguments (raw and decoded), never reasoning."""
    parts = [message.content]
    for call in message.tool_calls:
        parts.append(call.arguments)
        parts.extend(_argument_strings(call.arguments))
    return "\n".join(parts)


def _source_text(message: Message) -> str:
    """The text a fact may first appear in (a tool result's full text, before any bound)."""
    full = message.raw_content if message.raw_content is not None else message.content
    if not message.tool_calls:
        return full
    return "\n".join([full, *(c.arguments for c in message.tool_calls),
                      *(s for c in message.tool_calls for s in _argument_strings(c.arguments))])


@attrs.frozen
class Fact:
    """One fact: its text, kind, the messages it appears in (indices, ascending) and the
    assistant messages that wrote it."""

    text: str
    kind: str
    seen: tuple[int, ...]
    written: tuple[int, ...]


@attrs.define
class Counts:
    """Pooled retention counts: due and carried (request, fact) pairs per measure, and the
    needles a history search would reach."""

    facts_due: int = 0
    facts_kept: int = 0
    far_due: int = 0
    far_kept: int = 0
    needles_due: int = 0
    needles_kept: int = 0
    needles_searchable: int = 0  # kept, or reachable by session:search (upper bound)

    def add(self, other: Counts) -> None:
        for field in attrs.fields(Counts):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    @staticmethod
    def share(kept: int, due: int) -> float | None:
        return kept / due if due else None

    @property
    def continuation(self) -> float | None:
        return self.share(self.facts_kept, self.facts_due)

    @property
    def far(self) -> float | None:
        return self.share(self.far_kept, self.far_due)

    @property
    def needles(self) -> float | None:
        return self.share(self.needles_kept, self.needles_due)

    @property
    def needles_with_search(self) -> float | None:
        return self.share(self.needles_searchable, self.needles_due)


class RetentionScorer:
    """Scores the requests of one session. Each distinct message is searched once (a bit
    mask of the facts it carries, cached), so many policies over the same history stay cheap.
    """

    def __init__(self, messages: Sequence[Message], near: int = NEAR_MESSAGES) -> None:
        self.messages = tuple(messages)
        self.near = near
        seen: dict[str, list[int]] = {}
        kinds: dict[str, str] = {}
        written: dict[str, list[int]] = {}
        for index, message in enumerate(self.messages):
            if message.role == "system":
                continue
            for text, kind in facts_in(_source_text(message)).items():
                seen.setdefault(text, []).append(index)
                kinds.setdefault(text, kind)
            if message.role == "assistant":
                for text in facts_in(written_text(message)):
                    written.setdefault(text, []).append(index)
        facts = [Fact(t, kinds[t], tuple(seen[t]), tuple(w)) for t, w in written.items()
                 if t in seen and seen[t][0] < w[-1]]
        self.facts = tuple(sorted(facts, key=lambda f: (f.seen[0], f.text)))
        self._masks: dict[Message, int] = {}
        self._due: dict[int, tuple[int, int, int]] = {}
        self._searched: dict[int, bool] = {}

    # -- what is due before message m ------------------------------------------------------
    def due(self, m: int) -> tuple[int, int, int]:
        """Masks of the continuation facts, far facts and needles due at the request that
        produced message ``m``."""
        cached = self._due.get(m)
        if cached is not None:
            return cached
        facts = far = needles = 0
        for i, fact in enumerate(self.facts):
            if fact.seen[0] >= m:
                break
            if fact.written[-1] < m:
                continue
            bit = 1 << i
            facts |= bit
            before = bisect.bisect_left(fact.seen, m)  # occurrences before m
            if fact.seen[before - 1] < m - self.near:
                far |= bit
            if before == 1:
                needles |= bit
        self._due[m] = (facts, far, needles)
        return self._due[m]

    # -- what a request carries ------------------------------------------------------------
    def _mask(self, message: Message) -> int:
        cached = self._masks.get(message)
        if cached is not None:
            return cached
        text = written_text(message)
        mask = 0
        for i, fact in enumerate(self.facts):
            if fact.text in text:
                mask |= 1 << i
        self._masks[message] = mask
        return mask

    def carried(self, request: Iterable[Message]) -> int:
        mask = 0
        for message in request:
            mask |= self._mask(message)
        return mask

    def _searchable(self, bit_index: int, m: int) -> bool:
        """Whether ``session:search`` for the fact over the transcript before ``m`` returns a
        message holding it (computed once per fact, at the first request that asks)."""
        cached = self._searched.get(bit_index)
        if cached is not None:
            return cached
        from ctxfold.capabilities.session_search import search

        fact = self.facts[bit_index]
        found = False
        try:
            answer = search(self.messages[:m], {"query": fact.text})
        except Exception:  # a query the capability refuses is a miss, not a crash
            answer = {"hits": []}
        for hit in answer["hits"]:
            index = int(str(hit["ref"]).lstrip("#"))
            if fact.text in _source_text(self.messages[index]):
                found = True
                break
        self._searched[bit_index] = found
        return found

    def score(self, request: Sequence[Message], m: int, *, search: bool = False) -> Counts:
        """The counts of ``request``, sent before canonical message ``m``; with ``search``
        the policy offers history search (the needle upper bound)."""
        facts, far, needles = self.due(m)
        if not facts:
            return Counts()
        kept = self.carried(request)
        lost_needles = needles & ~kept
        searchable = (needles & kept).bit_count()
        if search and lost_needles:
            i = 0
            rest = lost_needles
            while rest:
                if rest & 1 and self._searchable(i, m):
                    searchable += 1
                rest >>= 1
                i += 1
        return Counts(facts.bit_count(), (facts & kept).bit_count(), far.bit_count(),
                      (far & kept).bit_count(), needles.bit_count(),
                      (needles & kept).bit_count(), searchable)


@attrs.define
class RetentionSummary:
    """A policy's retention over its requests: pooled over all of them, and over those from
    its first maintenance on (``None`` when it never maintained)."""

    all: Counts = attrs.field(factory=Counts)
    after_first_fold: Counts | None = None

    @classmethod
    def of(cls, records: Sequence[tuple[Counts, bool]]) -> RetentionSummary:
        """From ``(counts, after_first_fold)`` per request."""
        total, after = Counts(), None
        for counts, folded in records:
            total.add(counts)
            if folded:
                after = after or Counts()
                after.add(counts)
        return cls(total, after)
