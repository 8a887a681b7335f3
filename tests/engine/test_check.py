"""Summaries checked before install: the fold region's critical facts that a summary lost are
kept verbatim (bounded), the receipt records the score before and after, and the optional
second pass asks the summarizer once more."""

from __future__ import annotations

import json

import attrs
import pytest
from tests.conftest import make_config

import ctxfold
from ctxfold import Message, SummaryResult, ToolCall
from ctxfold.engine.check import FACTS_HEADING, check_summary, kept_facts, region_facts
from ctxfold.kernel.config import CheckpointConfig
from ctxfold.kernel.summary import (
    SUMMARY_INSTRUCTION_MARKER,
    briefing_tokens,
    is_summary_message,
    unwrap_summary,
    wrap_summary,
)
from ctxfold.testing import RecordingSummarizer

CONSTRAINT = "Do not change the public signature of parse_config."
ERROR = "ValueError: limit 4096 exceeds maximum 1024"
NEXT = "Next I will relax the bound in src/limits.py and rerun the tests."


def region() -> list[Message]:
    call = ToolCall(id="c1", name="bash", arguments=json.dumps({"command": "pytest -x"}))
    return [
        Message(role="user", content=f"Please hurry. {CONSTRAINT}"),
        Message(role="assistant", content="Reading src/config.py first.", tool_calls=(call,)),
        Message(role="tool", tool_call_id="c1", content=f"Traceback ...\n{ERROR}\n1 failed"),
        Message(role="assistant", content=f"Found it.\n{NEXT}"),
    ]


def test_what_the_summary_lost_is_kept_verbatim_and_scored_before_and_after():
    checked = check_summary(region(), [], "## Goal\n- make limits configurable", 64_000)
    assert checked.before == 0.0 and checked.after == 1.0
    assert checked.text.startswith("## Goal\n- make limits configurable\n\n" + FACTS_HEADING)
    assert checked.repaired == (
        f"- constraint: {CONSTRAINT}", f"- error: {ERROR}", f"- next step: {NEXT}",
        "- files: src/config.py · src/limits.py", "- command: pytest -x",
        "- names: parse_config")
    assert [f.text for f in kept_facts(checked.text)] == [
        CONSTRAINT, ERROR, NEXT, "src/config.py", "src/limits.py", "pytest -x", "parse_config"]


def test_facts_the_summary_or_the_kept_messages_carry_are_not_repeated():
    summary = f"## Standing facts & constraints\n- {CONSTRAINT.lower()}\n## Errors\n- {ERROR}"
    kept = [Message(role="user", content="see src/config.py and src/limits.py; ran pytest -x")]
    checked = check_summary(region(), kept, summary, 64_000)
    assert checked.repaired == (f"- next step: {NEXT}",)
    assert 0 < checked.before < checked.after == 1.0
    untouched = check_summary(region(), kept, summary + "\n" + NEXT, 64_000)
    assert untouched.text == summary + "\n" + NEXT and untouched.repaired == ()
    assert untouched.before == untouched.after == 1.0


def test_the_facts_list_is_bounded_to_twice_the_briefing():
    files = " ".join(f"pkg/{'sub' * 20}/module_{n:03}.py" for n in range(400))
    many = [Message(role="assistant", content=f"Touched {files}")]
    checked = check_summary(many, [], "## Goal\n- x", 8_000)
    added = len(checked.text) - len("## Goal\n- x")
    assert 0 < len(checked.repaired) < 60  # the probes: at most 60 paths
    assert added <= briefing_tokens(8_000) * 4 * 2 + 2  # 4 characters a token, twice
    assert checked.before == 0.0 and 0 < checked.after < 1.0


def test_an_earlier_summary_s_kept_facts_carry_into_the_next_check():
    first = check_summary(region(), [], "## Goal\n- x", 64_000)
    later = [wrap_summary(first.text),
             Message(role="assistant", content="Relaxing the bound now, as planned.")]
    facts = region_facts(later)
    assert [f.text for f in facts][:2] == [CONSTRAINT, ERROR]
    assert "Relaxing the bound now, as planned." in [f.text for f in facts]
    assert NEXT not in [f.text for f in facts]  # only the newest next step counts


def open_rounds(tmp_path, check: str, summarizer, *, rounds: int = 10, size: int = 3000):
    """System, task, :func:`region`, then ``rounds`` tool rounds of ``size`` characters."""
    config = attrs.evolve(make_config(tmp_path, window=20_000),
                          checkpoint=CheckpointConfig(check=check, extract_rules=False))
    cm = ctxfold.open_session("s", config=config, summarizer=summarizer)
    cm.append(Message(role="system", content="You are a coding agent."),
              Message(role="user", content="Fix the limits bug."), *region())
    for i in range(rounds):
        cm.append(Message(role="assistant", tool_calls=(ToolCall(id=f"r{i}", name="read"),)))
        cm.append_tool_result(f"r{i}", f"output {i} " + "y" * size, tool_name="read")
    return cm


def fold_session(tmp_path, check: str, summarizer):
    cm = open_rounds(tmp_path, check, summarizer)
    cm.compact()
    return cm


def test_the_installed_summary_and_the_receipt_carry_the_repair(tmp_path):
    cm = fold_session(tmp_path, "repair", RecordingSummarizer())
    summary = next(m for m in cm.view() if is_summary_message(m))
    text = unwrap_summary(summary)
    assert f"- constraint: {CONSTRAINT}" in text and f"- error: {ERROR}" in text
    receipt = cm.state.last_receipt
    assert receipt.probes_before == 0.0 and receipt.probes_after == 1.0
    assert f"- error: {ERROR}" in receipt.repaired
    reopened = ctxfold.open_session("s", config=cm.config)
    assert reopened.state.last_receipt == receipt  # the sidecar keeps the check


def test_with_the_check_off_the_summary_is_installed_as_written(tmp_path):
    cm = fold_session(tmp_path, "off", RecordingSummarizer())
    summary = next(m for m in cm.view() if is_summary_message(m))
    assert FACTS_HEADING not in summary.content
    assert cm.state.last_receipt.probes_before is None


@pytest.mark.parametrize("second", ["answers", "fails"])
def test_the_second_pass_asks_once_more_naming_the_lost_facts(tmp_path, second):
    revised = SummaryResult(f"## Goal\n- fix limits\n- {CONSTRAINT}\n- {ERROR}")
    answers = [SummaryResult("## Goal\n- fix limits"),
               revised if second == "answers" else SummaryResult("", finish_reason="length")]
    summarizer = RecordingSummarizer(answers)
    cm = fold_session(tmp_path, "second-pass", summarizer)
    first, again = summarizer.requests
    assert again.messages[: len(first.messages)] == first.messages  # a cache extension
    assert again.messages[-2].content == "## Goal\n- fix limits"
    assert again.messages[-1].content.startswith(SUMMARY_INSTRUCTION_MARKER)
    assert f"- constraint: {CONSTRAINT}" in again.messages[-1].content
    assert cm.summary_calls == 2
    text = unwrap_summary(next(m for m in cm.view() if is_summary_message(m)))
    receipt = cm.state.last_receipt
    assert receipt.probes_before == 0.0 and receipt.probes_after == 1.0
    if second == "answers":  # the model kept them itself: only what it still lost is added
        assert text.startswith(revised.text)
        assert f"- constraint: {CONSTRAINT}" not in receipt.repaired
    else:  # a failed second pass keeps the first summary, repaired
        assert text.startswith("## Goal\n- fix limits\n\n" + FACTS_HEADING)
        assert f"- constraint: {CONSTRAINT}" in receipt.repaired


def test_terms_of_a_task_the_head_keeps_clipped_are_kept_in_the_summary(tmp_path):
    filler = "please look at this carefully " * 400
    task = f"{filler}The failing helper is normalize_limits_v2 in the core. {filler}"
    config = attrs.evolve(make_config(tmp_path, window=20_000),
                          checkpoint=CheckpointConfig(extract_rules=False))
    cm = ctxfold.open_session("s", config=config, summarizer=RecordingSummarizer())
    cm.append(Message(role="system", content="You are a coding agent."),
              Message(role="user", content=task))
    for i in range(10):
        cm.append(Message(role="assistant", tool_calls=(ToolCall(id=f"r{i}", name="read"),)))
        cm.append_tool_result(f"r{i}", f"output {i} " + "y" * 3000, tool_name="read")
    cm.compact()
    head = cm.view()[1]
    assert "normalize_limits_v2" not in head.content  # clipped out of the head
    text = unwrap_summary(next(m for m in cm.view() if is_summary_message(m)))
    assert "- task terms: normalize_limits_v2" in text



def test_a_second_pass_counts_against_the_two_summaries_of_a_prepare(tmp_path):
    # A long briefing that loses every fact: each fold asks for a second pass, and the first
    # checkpoint stays above the trigger, so a second fold is due in the same prepare.
    summarizer = RecordingSummarizer([SummaryResult("## Goal\n" + "- step done\n" * 1800)] * 8)
    cm = open_rounds(tmp_path, "second-pass", summarizer, rounds=48, size=1500)
    assert cm.trigger_tokens < cm.estimate() < cm.hard_ceiling  # pressure, not a rescue
    prepared = cm.prepare()
    assert prepared.summary_calls == len(summarizer.requests) == 2
