"""Standing rules that never fold: ``cm.pin()``, rules extracted from user messages, their
place in every checkpoint (byte-identical, right after the task) and the refusal of a fold
whose candidate lacks one."""

from __future__ import annotations

import json

import attrs
import pytest
from tests.conftest import make_config

import ctxfold
from ctxfold import Action, Message, MessageError, ToolCall
from ctxfold.engine import check as check_module
from ctxfold.engine.pins import (
    LEFT_TO_SUMMARY,
    PINS_OPEN_TAG,
    Rule,
    is_pin_block,
    pin_block,
    standing_rules,
)
from ctxfold.kernel.config import CheckpointConfig
from ctxfold.kernel.summary import is_summary_message
from ctxfold.kernel.types import PinBlock
from ctxfold.testing import RecordingSummarizer

RULE = "Never push directly to the main branch."


def tool_round(cm, i: int, size: int = 3000) -> None:
    cm.append(Message(role="assistant", tool_calls=(
        ToolCall(id=f"c{i}", name="read", arguments=json.dumps({"path": f"f{i}.py"})),)))
    cm.append_tool_result(f"c{i}", f"output {i} " + "y" * size, tool_name="read")


def start(cm) -> None:
    cm.append(Message(role="system", content="You are a coding agent."),
              Message(role="user", content="Fix the bug in the parser."))


def blocks(cm) -> list[Message]:
    return [m for m in cm.view() if is_pin_block(m)]


def checkpoints(cm, n: int, rounds: int = 10) -> list[list[Message]]:
    """Fold ``n`` times; the view after each fold."""
    views = []
    for k in range(n):
        for i in range(rounds):
            tool_round(cm, 100 * k + i)
        cm.compact()
        views.append(cm.view())
    return views


def test_a_pinned_rule_stands_byte_identical_right_after_the_task_in_every_checkpoint(
        open_session):
    cm = open_session(window=20_000, summarizer=RecordingSummarizer())
    start(cm)
    record = cm.pin(RULE, reason="team policy")
    assert record.local_only and record.origin == "host"
    assert RULE not in "".join(m.content for m in cm.view())  # a record is never sent
    versions = set()
    lines = set()
    for view in checkpoints(cm, 3):
        assert [m.role for m in view[:2]] == ["system", "user"]
        assert is_pin_block(view[2]) and is_summary_message(view[3])
        line = next(x for x in view[2].content.splitlines() if RULE in x)
        assert line == f"- (#2; pinned: team policy) {RULE}"
        lines.add(line)
        versions.add(view[2].content)
    assert len(lines) == 1 and len(versions) == 1  # byte-identical: the head stays cached
    assert cm.state.projection.projection_version >= 3


def test_rules_the_user_stated_are_extracted_once_folded_and_not_when_switched_off(tmp_path):
    def run(extract: bool):
        config = attrs.evolve(make_config(tmp_path / str(extract), window=20_000),
                              checkpoint=CheckpointConfig(extract_rules=extract))
        cm = ctxfold.open_session("s", config=config, summarizer=RecordingSummarizer())
        start(cm)
        cm.append(Message(role="user", content=f"Good start. {RULE} Also, keep going."))
        checkpoints(cm, 2)
        return cm

    cm = run(True)
    block = blocks(cm)[0].content
    assert f"- (#2; user) {RULE}" in block
    assert "Fix the bug" not in block  # the head carries the task verbatim: not repeated
    assert blocks(run(False)) == []


def test_pin_by_message_reference_keeps_that_message_s_text_and_id(open_session):
    cm = open_session(window=20_000, summarizer=RecordingSummarizer())
    start(cm)
    cm.append(Message(role="user", content="Use tabs, not spaces, in the Makefile.", id="m-7"))
    cm.pin(message_id="#2", reason="build")
    cm.pin(message_id="m-7")  # the same text again: listed once
    checkpoints(cm, 1)
    block = blocks(cm)[0].content
    assert block.count("Use tabs, not spaces") == 1
    assert "- (#2, id m-7; pinned: build) Use tabs, not spaces, in the Makefile." in block


@pytest.mark.parametrize(("args", "kwargs", "words"), [
    ((), {}, "not both or neither"),
    (("x",), {"message_id": "#0"}, "not both or neither"),
    (("   ",), {}, "empty"),
    ((), {"message_id": "#99"}, "past the end"),
    ((), {"message_id": "../../etc/passwd"}, "no message"),
    (("rule",), {"reason": "two\nlines"}, "one line"),
    (("word " * 2000,), {}, "over their budget"),
])
def test_a_bad_pin_is_refused_with_a_clear_error_and_nothing_appended(open_session, args,
                                                                       kwargs, words):
    cm = open_session(window=20_000)
    start(cm)
    before = cm.canonical
    with pytest.raises(MessageError, match=words):
        cm.pin(*args, **kwargs)
    assert cm.canonical == before


def test_pins_are_kept_by_the_transcript_reopen_rewind_and_fork(tmp_path):
    config = make_config(tmp_path, window=20_000)
    cm = ctxfold.open_session("s", config=config, summarizer=RecordingSummarizer())
    start(cm)
    cm.pin(RULE)
    again = ctxfold.open_session("s", config=config, summarizer=RecordingSummarizer())
    assert [r.text for r in standing_rules(again.canonical, 0, extract=False)[0]] == [RULE]
    fork = again.fork("f")
    assert [r.text for r in standing_rules(fork.canonical, 0, extract=False)[0]] == [RULE]
    again.rewind(2)
    assert standing_rules(again.canonical, 0, extract=False)[0] == []


def test_over_budget_the_oldest_extracted_rules_are_left_to_the_summary_never_a_pin():
    def count(message: Message) -> int:
        return len(message.content) // 4

    pins = [Rule("Never delete user data.", 1, pinned=True)]
    extracted = [Rule(f"You must keep rule number {n} in mind.", 10 + n) for n in range(30)]
    block = pin_block(pins, extracted, head=[], budget=60, count=count)
    assert block is not None and block.rules[0] == "Never delete user data."
    kept = [r for r in extracted if r.text in block.rules]
    assert 0 < len(kept) < 30 and kept == extracted[-len(kept):]  # the newest stay
    left = [f"#{r.position}" for r in extracted[: 30 - len(kept)]]
    assert LEFT_TO_SUMMARY.format(refs=", ".join(left)) in block.message.content
    # Pins alone over budget: all of them stay, no extracted rule does.
    tight = pin_block(pins, extracted, head=[], budget=1, count=count)
    assert tight is not None and tight.rules == ("Never delete user data.",)


def test_a_fold_whose_candidate_lacks_a_pinned_rule_is_not_installed(open_session,
                                                                     monkeypatch):
    cm = open_session(window=20_000, summarizer=RecordingSummarizer())
    start(cm)
    cm.pin(RULE)

    original = check_module.Checker.pins

    def broken(self, canonical, folded, head, window):  # drops the rule from its message
        block = original(self, canonical, folded, head, window)
        gutted = attrs.evolve(block.message, content=PINS_OPEN_TAG + "\n(nothing)")
        return PinBlock(gutted, block.rules)

    monkeypatch.setattr(check_module.Checker, "pins", broken)
    for i in range(10):
        tool_round(cm, i)
    prepared = cm.compact()
    assert cm.state.projection is None and prepared.action.value == "blocked"
    receipt = cm.state.last_receipt
    assert receipt.status is Action.BLOCKED
    assert receipt.reason == f"checkpoint candidate lacks the pinned rule {RULE!r}"
