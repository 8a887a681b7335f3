"""Fidelity probes: what a request still lets the model see of a session's facts.

Used twice: the replay scores every policy's requests with them, and the engine checks a
checkpoint candidate against the probes of its fold region before installing it
(:mod:`ctxfold.engine.check`).

Deterministic probes are drawn from the canonical transcript, each with the message it was
introduced in and a weight. Before request *r* (the request that produced canonical message
*m*), every probe introduced in a message before *m* is **retained** if the request still
carries its text — verbatim in a message, or inside a summary. A request's *fidelity* is the
weighted share of retained probes.

Probe kinds and weights follow CompactBench's weighting of what a compacted context must keep
(locked decisions and forbidden behaviours 3, immutable facts and unresolved tasks 2,
entities and planning 1; https://compactbench.github.io/compactbench/methodology) over the
probe categories of Factory.ai's evaluation (artifacts, decisions, task state;
https://factory.ai/news/evaluating-compression):

======================  ======  ==============================================================
kind                    weight  drawn from
======================  ======  ==============================================================
``constraint``          3       user sentences with always/never/must/don't/do not/only/avoid
``task``                2       the task statement (first user message): identifiers, paths,
                                numbers, quoted strings
``error``               2       tool results: ``XxxError``/``XxxException`` and its message
``command``             1       commands the agent ran (a tool call's ``command``/``cmd``,
                                first line, at least 5 characters)
``outcome``             1       a tool result's last line when it reports an outcome
``path``                1       file paths the user or the agent wrote (not listings)
``identifier``          1       snake_case / CamelCase names the user or the agent wrote
======================  ======  ==============================================================

This measures what the model *can see*, not whether it would answer well: a probe carried in
a 30K-token request may still be overlooked, and a paraphrase that keeps the meaning but not
the text counts as lost. Constraints are matched case- and whitespace-insensitively, all
other probes exactly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

import attrs

from ctxfold.kernel.summary import is_summary_message
from ctxfold.kernel.types import Message

WEIGHTS: dict[str, int] = {"constraint": 3, "task": 2, "error": 2, "command": 1, "outcome": 1,
                           "path": 1, "identifier": 1}
#: At most this many probes of each kind per session (the earliest ones), so long sessions
#: do not drown the rare kinds.
PER_KIND_LIMIT: dict[str, int] = {"constraint": 40, "task": 40, "error": 40, "command": 60,
                                  "outcome": 40, "path": 60, "identifier": 60}
#: A request retaining less than this share of its probes counts as "below half".
LOW_FIDELITY = 0.5

_CONSTRAINT = re.compile(r"\b(always|never|must|mustn't|don't|do not|only|avoid|should not|"
                         r"shouldn't|make sure)\b", re.IGNORECASE)
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")
_PATH = re.compile(r"(?<![\w/.-])(?:\.{0,2}/)?(?:[\w.-]+/)*[\w-]+\.(?:py|pyi|js|jsx|ts|tsx|go|"
                   r"rs|java|kt|c|cc|cpp|h|hpp|rb|php|cs|swift|md|rst|txt|toml|json|yaml|yml|"
                   r"ini|cfg|sh|sql|html|css|xml|lock)\b")
_IDENT = re.compile(r"\b(?:[A-Za-z][a-z0-9]*_[A-Za-z0-9_]+|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+)\b")
_NUMBER = re.compile(r"(?<![\w.])\d[\d.,]*\d(?![\w])")
_QUOTED = re.compile(r"`([^`\n]{3,60})`|\"([^\"\n]{3,60})\"|'([^'\n]{3,60})'")
_ERROR = re.compile(r"\b([A-Z][A-Za-z0-9]*(?:Error|Exception))\b(?::[ \t]*([^\n]{1,60}))?")
_OUTCOME = re.compile(r"\b(passed|failed|exit code|exit status|returncode|return code|"
                      r"succeeded|errors?=\d+|\d+ errors?)\b", re.IGNORECASE)
_LISTING_LINE = re.compile(r"^\d+[:-]")  # grep -n / diff context, not an outcome


@attrs.frozen
class Probe:
    """One fact to look for: its kind, its text and the canonical message that introduced it."""

    kind: str
    text: str
    introduced: int

    @property
    def weight(self) -> int:
        return WEIGHTS[self.kind]


def norm(text: str) -> str:
    """Lower-cased, whitespace-collapsed: how constraints are matched."""
    return " ".join(text.lower().split())


def _arguments(message: Message) -> list[str]:
    out = []
    for call in message.tool_calls:
        out.append(call.arguments)
    return out


def _decoded_arguments(message: Message) -> Iterable[dict[str, object]]:
    """Each tool call's arguments as a JSON object (calls whose arguments are not one are
    skipped)."""
    for call in message.tool_calls:
        try:
            args = json.loads(call.arguments or "{}")
        except ValueError:
            continue
        if isinstance(args, dict):
            yield args


def _argument_values(message: Message) -> list[str]:
    """The string values of a message's tool-call arguments, decoded (a command probe is
    drawn from the decoded value, so it is looked for there too)."""
    return [v for args in _decoded_arguments(message) for v in args.values()
            if isinstance(v, str)]


def _commands(message: Message) -> Iterable[str]:
    for args in _decoded_arguments(message):
        for key in ("command", "cmd"):
            value = args.get(key)
            if isinstance(value, str) and len(value.strip()) >= 5:
                yield value.strip().splitlines()[0][:80]


def constraint_sentences(text: str) -> Iterable[str]:
    """The sentences of ``text`` that state a constraint (12–200 characters with always /
    never / must / don't / do not / only / avoid / should not / make sure), verbatim."""
    for sentence in _SENTENCE_BREAK.split(text):
        sentence = sentence.strip()
        if 12 <= len(sentence) <= 200 and _CONSTRAINT.search(sentence):
            yield sentence


def is_user_written(message: Message) -> bool:
    """A message the user wrote (not a summary, a pin or anything else ctxfold wrote)."""
    return message.role == "user" and message.origin == "user" and not is_summary_message(message)


def _candidates(index: int, message: Message, first_user: int | None) -> Iterable[Probe]:
    text = message.text
    if is_user_written(message):
        for sentence in constraint_sentences(text):
            yield Probe("constraint", norm(sentence), index)
        if index == first_user:
            for m in _QUOTED.finditer(text):
                yield Probe("task", next(g for g in m.groups() if g), index)
            for pattern in (_PATH, _IDENT, _NUMBER):
                for found in pattern.findall(text):
                    yield Probe("task", found, index)
    if message.role == "tool":
        for m in _ERROR.finditer(text):
            yield Probe("error", m.group(0).rstrip(), index)
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if (lines and 4 <= len(lines[-1]) <= 80 and _OUTCOME.search(lines[-1])
                and not _LISTING_LINE.match(lines[-1])):
            yield Probe("outcome", lines[-1], index)
        return
    if message.role == "assistant":
        for command in _commands(message):
            yield Probe("command", command, index)
    written = "\n".join([text if message.role != "system" else "", *_arguments(message)])
    if message.role in ("user", "assistant") and not is_summary_message(message):
        for found in _PATH.findall(written):
            yield Probe("path", found, index)
        for found in _IDENT.findall(written):
            if len(found) >= 5:
                yield Probe("identifier", found, index)


def extract_probes(messages: Sequence[Message], *, task: bool = True) -> tuple[Probe, ...]:
    """The probes of a canonical transcript, in order of introduction (first occurrence of a
    text wins; at most :data:`PER_KIND_LIMIT` per kind). With ``task`` false the messages are
    a stretch of a session without its task statement (no ``task`` probes)."""
    first_user = next((i for i, m in enumerate(messages)
                       if m.role == "user" and not is_summary_message(m)), None) if task else None
    seen: set[str] = set()
    counts = dict.fromkeys(WEIGHTS, 0)
    out: list[Probe] = []
    for index, message in enumerate(messages):
        for probe in _candidates(index, message, first_user):
            key = probe.text if probe.kind != "constraint" else "\0" + probe.text
            full = counts[probe.kind] >= PER_KIND_LIMIT[probe.kind]
            if len(probe.text) < 3 or key in seen or full:
                continue
            seen.add(key)
            counts[probe.kind] += 1
            out.append(probe)
    return tuple(out)


@attrs.frozen
class RequestFidelity:
    """What one request retained: the weighted share and the share of user constraints
    (``None`` when no probe / no constraint had been introduced yet)."""

    weighted: float | None
    constraints: float | None


class FidelityScorer:
    """Scores requests of one session against its probes. Probe sets are bit masks; each
    distinct message is searched once and its mask cached, so a replay of many policies over
    the same messages stays cheap."""

    def __init__(self, probes: Sequence[Probe]) -> None:
        self.probes = tuple(probes)
        self._exact = [(1 << i, p.text) for i, p in enumerate(self.probes)
                       if p.kind != "constraint"]
        self._normed = [(1 << i, p.text) for i, p in enumerate(self.probes)
                        if p.kind == "constraint"]
        self._by_weight: dict[int, int] = {}
        for i, p in enumerate(self.probes):
            self._by_weight[p.weight] = self._by_weight.get(p.weight, 0) | (1 << i)
        self._constraint_mask = sum(m for m, _ in self._normed)
        self._cache: dict[Message, int] = {}

    def _mask(self, message: Message) -> int:
        cached = self._cache.get(message)
        if cached is not None:
            return cached
        text = "\n".join([message.text, message.reasoning_content or "",
                          *(f"{c.name} {c.arguments}" for c in message.tool_calls),
                          *_argument_values(message)])
        mask = 0
        for bit, needle in self._exact:
            if needle in text:
                mask |= bit
        if self._normed:
            normed = norm(text)
            for bit, needle in self._normed:
                if needle in normed:
                    mask |= bit
        self._cache[message] = mask
        return mask

    def carried(self, messages: Iterable[Message]) -> int:
        """The mask of probes some message of ``messages`` carries."""
        mask = 0
        for message in messages:
            mask |= self._mask(message)
        return mask

    def introduced_before(self, message_index: int) -> int:
        """The mask of probes introduced in messages before ``message_index``."""
        mask = 0
        for i, p in enumerate(self.probes):
            if p.introduced >= message_index:
                break
            mask |= 1 << i
        return mask

    def _weight(self, mask: int) -> int:
        return sum(w * (mask & bits).bit_count() for w, bits in self._by_weight.items())

    def score(self, request: Sequence[Message], message_index: int) -> RequestFidelity:
        """Fidelity of ``request``, sent before canonical message ``message_index``."""
        due = self.introduced_before(message_index)
        if not due:
            return RequestFidelity(None, None)
        kept = self.carried(request) & due
        due_constraints = due & self._constraint_mask
        constraints = ((kept & due_constraints).bit_count() / due_constraints.bit_count()
                       if due_constraints else None)
        return RequestFidelity(self._weight(kept) / self._weight(due), constraints)
