"""Standing rules that never fold: explicit pins and rules the user stated.

A pin is recorded in the canonical transcript as a ``local_only`` host message (never sent,
never rewritten; a rewind before it removes it, a fork keeps it), so every store keeps pins
without a schema of its own. Rules are also extracted deterministically from the messages the
user wrote (the probes' constraint sentences: always / never / must / don't …).

A checkpoint carries them in one host message right after the task statement
(:func:`pin_block`): each rule verbatim, with its provenance (``#N`` position, and id when the
message has one), oldest first. The list only grows as the session folds further, so a rule
stands byte-identical in every checkpoint. Within a budget of the window: over it, the oldest
extracted rules are left to the summary (whose check keeps lost constraints verbatim) and
named by position; explicit pins always stay.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import attrs

from ctxfold.capabilities.session_message import resolve
from ctxfold.engine.probes import constraint_sentences, is_user_written
from ctxfold.engine.transcript import with_role
from ctxfold.kernel.errors import MessageError, ToolResultError
from ctxfold.kernel.types import Message, PinBlock

#: First line of a pin record in the transcript, followed by its JSON provenance.
PIN_RECORD = "[ctxfold:pin]"
PINS_OPEN_TAG = "<standing-rules>"
PINS_CLOSE_TAG = "</standing-rules>"
PINS_PREAMBLE = ("Standing rules of this session, kept verbatim in every checkpoint (pinned "
                 "or stated by the user; #N is the message they come from):")
#: The line naming the oldest extracted rules left to the summary when over budget.
LEFT_TO_SUMMARY = "- Older rules left to the summary: {refs}."

Count = Callable[[Message], int]


def _tokens(count: Count, line: str) -> int:
    return count(Message(role="user", content=line))


@attrs.frozen
class Rule:
    """One standing rule: its text, the position of the message it comes from, that
    message's id, and the pin's reason (empty for an extracted rule)."""

    text: str
    position: int
    message_id: str = ""
    reason: str = ""
    pinned: bool = False

    def line(self) -> str:
        where = f"#{self.position}" + (f", id {self.message_id}" if self.message_id else "")
        label = f"pinned: {self.reason}" if self.reason else ("pinned" if self.pinned else "user")
        return f"- ({where}; {label}) {self.text}"


def pin_record(text: str, *, reason: str, source: int, source_id: str) -> Message:
    """The transcript message recording an explicit pin of ``text``."""
    if not text.strip():
        raise MessageError("pin: the rule text is empty; pass the text or a message_id")
    if "\n" in reason:
        raise MessageError("pin: reason must be one line")
    meta = json.dumps({"reason": reason, "source": source, "source_id": source_id},
                      ensure_ascii=False)
    return Message(role="user", content=f"{PIN_RECORD} {meta}\n{text}", origin="host",
                   local_only=True)


def new_pin(canonical: Sequence[Message], text: str | None, message_id: str | None,
            reason: str, *, budget: int, count: Count) -> Message:
    """The record of a pin of ``text`` or of the message ``message_id`` (``#N`` or an id),
    checked against the pins already in ``canonical`` and the ``budget`` (tokens)."""
    if (text is None) == (message_id is None):
        raise MessageError("pin: pass the rule text or message_id=, not both or neither")
    source, source_id = len(canonical), ""
    if message_id is not None:
        try:
            source = resolve(canonical, message_id, "message_id")
        except ToolResultError as exc:
            raise MessageError(f"pin: {exc}") from None
        text, source_id = canonical[source].text, canonical[source].id
    assert text is not None
    record = pin_record(text, reason=reason, source=source, source_id=source_id)
    pins, _ = standing_rules(canonical, 0, extract=False)
    new = _pinned(len(canonical), record)
    if new is not None and all(rule.text != new.text for rule in pins):
        pins.append(new)
    used = sum(_tokens(count, rule.line()) for rule in pins)
    if used > budget:
        raise MessageError(
            f"pin: the pinned rules would take {used} tokens, over their budget of {budget} "
            "([checkpoint] pins_ratio of the window); pin a shorter text")
    return record


def _pinned(position: int, message: Message) -> Rule | None:
    if not (message.local_only and message.origin == "host"
            and message.content.startswith(PIN_RECORD + " ")):
        return None
    first, _, text = message.content.partition("\n")
    try:
        meta = json.loads(first[len(PIN_RECORD) + 1:])
        source, source_id, reason = meta["source"], meta["source_id"], meta["reason"]
    except (ValueError, KeyError, TypeError):
        return None  # not a record this version wrote: ignored, never fatal
    if not (isinstance(source, int) and isinstance(source_id, str) and isinstance(reason, str)):
        return None
    return Rule(text, source if 0 <= source < position else position, source_id, reason, True)


def standing_rules(canonical: Sequence[Message], folded: int, *, extract: bool
                   ) -> tuple[list[Rule], list[Rule]]:
    """(explicit pins anywhere in ``canonical``, rules extracted from the user messages of
    ``canonical[:folded]``), each in transcript order, a text listed once."""
    pins: list[Rule] = []
    extracted: list[Rule] = []
    seen: set[str] = set()
    for position, message in with_role(canonical, "user"):  # pins are user-role records
        rule = _pinned(position, message)
        if rule is not None and rule.text not in seen:
            seen.add(rule.text)
            pins.append(rule)
    if extract:
        for position, message in with_role(canonical, "user", folded):
            if not is_user_written(message):
                continue
            for sentence in constraint_sentences(message.text):
                if sentence not in seen:
                    seen.add(sentence)
                    extracted.append(Rule(sentence, position, message.id))
    return pins, extracted


def pin_block(pins: Sequence[Rule], extracted: Sequence[Rule], *, head: Sequence[Message],
              budget: int, count: Count) -> PinBlock | None:
    """The checkpoint's standing-rules message: every pin, then the newest extracted rules
    that fit ``budget`` tokens (rules the ``head`` already carries verbatim are not
    repeated); ``None`` when there is no rule."""
    carried = "\n".join(m.content for m in head)
    extracted = [r for r in extracted if r.text not in carried]
    used = sum(_tokens(count, r.line()) for r in pins)
    kept: list[Rule] = []
    for rule in reversed(extracted):
        used += _tokens(count, rule.line())
        if used > budget:
            break
        kept.append(rule)
    left = extracted[: len(extracted) - len(kept)]
    rules = sorted([*pins, *kept], key=lambda r: r.position)
    if not rules:
        return None
    lines = [r.line() for r in rules]
    if left:
        lines.append(LEFT_TO_SUMMARY.format(refs=", ".join(f"#{r.position}" for r in left)))
    content = "\n".join([PINS_OPEN_TAG, PINS_PREAMBLE, *lines, PINS_CLOSE_TAG])
    return PinBlock(Message(role="user", content=content, origin="host"),
                    tuple(r.text for r in rules))


def is_pin_block(message: Message) -> bool:
    """True for a checkpoint's standing-rules message."""
    return message.role == "user" and message.origin == "host" and \
        message.content.startswith(PINS_OPEN_TAG)
