"""A checkpoint's summary checked before install, and what the checkpoint must carry.

The fold region's critical facts — the constraints the user stated, the last error, the
pending next step (the last thing the agent said it would do) and the files touched — are
the replay's fidelity probes of those kinds (:mod:`ctxfold.engine.probes`), plus the facts an
earlier summary in the region kept verbatim. Each is looked for in the candidate (summary +
kept messages) as the replay looks for it: constraints case- and whitespace-insensitively,
the rest exactly. What the summary lost is appended to it, deterministically, as a
``## Facts kept verbatim`` list bounded to a quarter of the briefing length; the receipt
records the weighted share carried before and after. No model call, unless the second pass
is switched on (``[checkpoint] check = "second-pass"``): the summarizer is then asked once
more, naming the lost facts, and the list repairs what it still lost.

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
from ctxfold.kernel.types import Message, PinBlock, Review

FACTS_HEADING = "## Facts kept verbatim"
#: The facts list holds at most this share of the briefing length (4 characters a token).
FACTS_SHARE = 1 / 4
#: Critical kinds, their weight in the score and their label in the list, in repair order.
CRITICAL: dict[str, tuple[int, str]] = {
    "constraint": (3, "constraint"), "error": (2, "error"), "next": (2, "next step"),
    "path": (1, "file"),
}
_LABELS = {label: kind for kind, (_, label) in CRITICAL.items()}
_NEXT_MIN, _NEXT_MAX = 12, 200


@attrs.frozen
class Fact:
    """One critical fact: its kind and its exact text."""

    kind: str
    text: str

    def found_in(self, text: str, normed: str) -> bool:
        return norm(self.text) in normed if self.kind == "constraint" else self.text in text

    def line(self) -> str:
        return f"- {CRITICAL[self.kind][1]}: {self.text}"


def kept_facts(summary: str) -> list[Fact]:
    """The facts an earlier summary kept verbatim (its ``## Facts kept verbatim`` list)."""
    _, heading, rest = summary.partition(FACTS_HEADING + "\n")
    facts: list[Fact] = []
    for line in rest.splitlines() if heading else ():
        if line.startswith("## "):
            break
        label, sep, text = line.removeprefix("- ").partition(": ")
        if sep and label in _LABELS and text:
            facts.append(Fact(_LABELS[label], text))
    return facts


def _next_step(messages: Sequence[Message]) -> Fact | None:
    for message in reversed(messages):
        if message.role == "assistant" and message.text.strip():
            sentences = [s.strip() for s in message.text.strip().splitlines() if s.strip()]
            last = sentences[-1] if sentences else ""
            return Fact("next", last) if _NEXT_MIN <= len(last) <= _NEXT_MAX else None
    return None


def region_facts(region: Sequence[Message]) -> list[Fact]:
    """The critical facts of a fold region, in repair order: constraints (oldest first), the
    last error, the next step, files (newest first); an earlier summary's kept facts after
    the region's own of each kind. Each text once."""
    carried = [f for m in region if is_summary_message(m) for f in kept_facts(unwrap_summary(m))]
    own = [m for m in region if not is_summary_message(m) and not is_pin_block(m)]
    probes = extract_probes(own, task=False)
    errors = [Fact("error", p.text) for p in probes if p.kind == "error"]
    by_kind: dict[str, list[Fact]] = {
        "constraint": [Fact("constraint", s) for m in own if is_user_written(m)
                       for s in constraint_sentences(m.text)],
        "error": errors[-1:],
        "next": [f for f in [_next_step(own)] if f is not None],
        "path": [Fact("path", p.text) for p in reversed(probes) if p.kind == "path"],
    }
    out: list[Fact] = []
    seen: set[str] = set()
    for kind, facts in by_kind.items():
        older = [f for f in carried if f.kind == kind]
        if kind in ("error", "next") and facts:
            older = []  # only the newest error and next step matter
        for fact in (*facts, *older):
            key = norm(fact.text) if kind == "constraint" else fact.text
            if key not in seen:
                seen.add(key)
                out.append(fact)
    return out


def _texts(messages: Iterable[Message]) -> Iterable[str]:
    for m in messages:
        yield m.text
        yield from (c.arguments for c in m.tool_calls)


def check_summary(region: Sequence[Message], kept: Sequence[Message], text: str,
                  window: int) -> Review:
    """:class:`Review` of ``text``: the lost critical facts of ``region`` appended within the
    budget, the weighted share carried before and after."""
    facts = region_facts(region)
    if not facts:
        return Review(text)
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
    budget = int(briefing_tokens(window) * 4 * FACTS_SHARE)
    lines: list[str] = []
    used = len(FACTS_HEADING)
    for fact in lost:
        line = fact.line()
        if used + len(line) + 1 > budget:
            continue  # a shorter fact further down may still fit
        lines.append(line)
        used += len(line) + 1
    repaired = f"{text}\n\n{FACTS_HEADING}\n" + "\n".join(lines) if lines else text
    return Review(repaired, share(before), share(carried(repaired)), tuple(lines),
                  tuple(f.line().removeprefix("- ") for f in lost))


@attrs.frozen
class Reviewer:
    """The built-in :class:`~ctxfold.kernel.contracts.CheckpointReview`, configured by
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

    def review(self, region: Sequence[Message], kept: Sequence[Message], text: str,
               window: int) -> Review:
        if self.config.check == "off":
            return Review(text)
        return check_summary(region, kept, text, window)
