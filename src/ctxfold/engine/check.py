"""A checkpoint's summary checked before install, and what the checkpoint must carry.

The fold region's critical facts — the constraints the user stated, the task statement's
terms (they matter when the head keeps it clipped), the last error, the pending next step (the
last thing the agent said it would do) and the files touched, then, with what room is left,
the commands run and the names written — are the replay's fidelity probes of those kinds
(:mod:`ctxfold.engine.probes`), plus the facts an earlier summary in the region kept verbatim.
Each is looked for in the candidate (summary + kept messages) as the replay looks for it:
constraints case- and whitespace-insensitively, the rest exactly. What the summary lost is
appended to it, deterministically, as a ``## Facts kept verbatim`` list bounded to twice
the briefing length; the receipt records the weighted share carried before and after. No
model call, unless the second pass is switched on (``[checkpoint] check = "second-pass"``):
the summarizer is then asked once more, naming the lost facts, and the list repairs what it
still lost.

This measures and repairs what the model *can see*; the replay's fidelity score uses the same
probes, so the gain it shows for these kinds is by construction — the gain that counts is
that the facts are there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import attrs

from ctxfold.engine.pins import is_pin_block, pin_block, standing_rules
from ctxfold.engine.probes import constraint_sentences, extract_probes, is_user_written, norm
from ctxfold.kernel.config import CheckpointConfig
from ctxfold.kernel.summary import briefing_tokens, is_summary_message, unwrap_summary
from ctxfold.kernel.types import CheckResult, Message, PinBlock

FACTS_HEADING = "## Facts kept verbatim"
#: The facts list holds at most this multiple of the briefing length (4 characters a
#: token): verbatim facts cost no output tokens, so they carry more than the prose does.
FACTS_SHARE = 2
#: Kinds checked, in repair order: (weight in the score, label in the list, one line for
#: all facts of the kind). The critical ones first, then commands and names, which get what
#: room is left.
CRITICAL: dict[str, tuple[int, str, bool]] = {
    "constraint": (3, "constraint", False), "task": (2, "task terms", True),
    "error": (2, "error", False), "next": (2, "next step", False),
    "path": (1, "files", True), "command": (1, "command", False),
    "identifier": (1, "names", True),
}
#: Between the facts of a one-line kind (not in paths, names or short task terms).
JOIN = " · "
_LABELS = {label: kind for kind, (_, label, _) in CRITICAL.items()}
_NEXT_MIN, _NEXT_MAX = 12, 200


@attrs.frozen
class Fact:
    """One fact to keep: its kind and its exact text."""

    kind: str
    text: str

    def found_in(self, text: str, normed: str) -> bool:
        return norm(self.text) in normed if self.kind == "constraint" else self.text in text

    @property
    def label(self) -> str:
        return CRITICAL[self.kind][1]


def render(facts: Sequence[Fact], budget: int) -> list[str]:
    """The list lines of ``facts`` (in order) within ``budget`` characters: one line per
    fact, or per kind for the one-line kinds; a fact that does not fit is skipped."""
    lines: list[str] = []
    grouped: dict[str, int] = {}  # kind -> index of its line
    used = len(FACTS_HEADING)
    for fact in facts:
        if CRITICAL[fact.kind][2] and fact.kind in grouped:
            extra = JOIN + fact.text
            if used + len(extra) <= budget:
                lines[grouped[fact.kind]] += extra
                used += len(extra)
            continue
        line = f"- {fact.label}: {fact.text}"
        if used + len(line) + 1 > budget:
            continue
        if CRITICAL[fact.kind][2]:
            grouped[fact.kind] = len(lines)
        lines.append(line)
        used += len(line) + 1
    return lines


def facts_list(summary: str) -> list[str]:
    """The lines of a summary's ``## Facts kept verbatim`` list."""
    _, heading, rest = summary.partition(FACTS_HEADING + "\n")
    lines: list[str] = []
    for line in rest.splitlines() if heading else ():
        if not line.startswith("- "):
            break
        lines.append(line)
    return lines


def kept_facts(summary: str) -> list[Fact]:
    """The facts an earlier summary kept verbatim (its :func:`facts_list`)."""
    facts: list[Fact] = []
    for line in facts_list(summary):
        label, sep, text = line.removeprefix("- ").partition(": ")
        kind = _LABELS.get(label)
        if sep and kind is not None and text:
            texts = text.split(JOIN) if CRITICAL[kind][2] else [text]
            facts.extend(Fact(kind, t) for t in texts if t)
    return facts


def _next_step(messages: Sequence[Message]) -> Fact | None:
    for message in reversed(messages):
        if message.role == "assistant" and message.text.strip():
            sentences = [s.strip() for s in message.text.strip().splitlines() if s.strip()]
            last = sentences[-1] if sentences else ""
            return Fact("next", last) if _NEXT_MIN <= len(last) <= _NEXT_MAX else None
    return None


def region_facts(region: Sequence[Message], task: Message | None = None) -> list[Fact]:
    """The facts to keep of a fold region, in repair order: constraints, the ``task``
    statement's terms, the last error, the next step, files, commands, names, then the
    earlier errors — each kind in the order first seen, an earlier summary's kept facts
    before the region's own (only the newest next step counts). Each text once."""
    carried = [f for m in region if is_summary_message(m) for f in kept_facts(unwrap_summary(m))]
    own = [m for m in region if not is_summary_message(m) and not is_pin_block(m)]
    probes = extract_probes(own, task=False)

    def of(kind: str) -> list[Fact]:  # probes of constraints are normalized: not these
        return [f for f in carried if f.kind == kind] + [
            Fact(kind, p.text) for p in probes if p.kind == kind != "constraint"]

    errors = of("error")
    nexts = [f for f in [_next_step(own)] if f is not None] or of("next")[-1:]
    stated = [Fact("constraint", s) for m in own if is_user_written(m)
              for s in constraint_sentences(m.text)]
    terms = [Fact("task", p.text) for p in extract_probes([task]) if p.kind == "task"] \
        if task is not None else []
    ordered = [*of("constraint"), *stated, *terms, *errors[-1:], *nexts, *of("path"),
               *of("command"), *of("identifier"), *errors[:-1]]
    out: list[Fact] = []
    seen: set[str] = set()
    for fact in ordered:
        key = norm(fact.text) if fact.kind == "constraint" else fact.text
        if key not in seen:
            seen.add(key)
            out.append(fact)
    return out


def _texts(messages: Iterable[Message]) -> Iterable[str]:
    for m in messages:
        yield m.text
        yield from (c.arguments for c in m.tool_calls)


def check_summary(region: Sequence[Message], kept: Sequence[Message], text: str,
                  window: int, task: Message | None = None) -> CheckResult:
    """:class:`CheckResult` of ``text``: the lost facts of ``region`` (and of the ``task``
    statement) appended within the budget, the weighted share carried before and after."""
    facts = region_facts(region, task)
    if not facts:
        return CheckResult(text)
    rest = "\n".join(_texts(kept))
    rest_normed = norm(rest)

    def carried(summary: str) -> list[bool]:
        normed = norm(summary)
        return [f.found_in(summary, normed) or f.found_in(rest, rest_normed) for f in facts]

    def share(found: list[bool]) -> float:
        weights = [CRITICAL[f.kind][0] for f in facts]
        return sum(w for w, ok in zip(weights, found, strict=True) if ok) / sum(weights)

    before = carried(text)
    lost = [f for f, ok in zip(facts, before, strict=True) if not ok]
    lines = render(lost, int(briefing_tokens(window) * 4 * FACTS_SHARE))
    repaired = f"{text}\n\n{FACTS_HEADING}\n" + "\n".join(lines) if lines else text
    return CheckResult(repaired, share(before), share(carried(repaired)), tuple(lines),
                  tuple(f"{f.label}: {f.text}" for f in lost))


@attrs.frozen
class Checker:
    """The built-in :class:`~ctxfold.kernel.contracts.SummaryCheck`, configured by
    ``[checkpoint]``; ``count`` measures a message in tokens (the session's estimator)."""

    config: CheckpointConfig
    count: Callable[[Message], int]

    @property
    def second_pass(self) -> bool:
        return self.config.check == "second-pass"

    def pins(self, canonical: Sequence[Message], folded: int, head: Sequence[Message],
             window: int) -> PinBlock | None:
        pins, extracted = standing_rules(canonical, folded, extract=self.config.extract_rules)
        if not pins and not extracted:
            return None
        return pin_block(pins, extracted, head=head, budget=int(window * self.config.pins_ratio),
                         count=self.count)

    def check(self, region: Sequence[Message], kept: Sequence[Message], text: str,
               window: int, task: Message | None = None) -> CheckResult:
        if self.config.check == "off":
            return CheckResult(text)
        return check_summary(region, kept, text, window, task)
