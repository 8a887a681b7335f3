"""The independent fidelity (continuation facts, far facts, needles) on hand-made sessions
whose answers are known, and its independence from what the engine checks."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from ctxfold import Message, ToolCall
from ctxfold.replay.retention import Counts, RetentionScorer, RetentionSummary, facts_in

REPO = Path(__file__).resolve().parents[2]


def call(i: int, command: str) -> Message:
    return Message(role="assistant", content=f"step {i}", tool_calls=(
        ToolCall(id=f"c{i}", name="bash", arguments=json.dumps({"command": command})),))


def result(i: int, text: str) -> Message:
    return Message(role="tool", content=text, tool_call_id=f"c{i}", name="bash")


def test_facts_of_each_kind_are_found() -> None:
    found = facts_in('Edit src/app/config.py: parse_config raised ValueError at line 4096; '
                     'ConfigLoader said "limit exceeds maximum" via os.path.join')
    assert found["src/app/config.py"] == "path"
    assert found["parse_config"] == "identifier"
    assert found["ConfigLoader"] == "identifier"
    assert found["os.path.join"] == "identifier"
    assert found["4096"] == "number"
    assert found["ValueError"] == "error"
    assert found["limit exceeds maximum"] == "quoted"
    assert "at" not in found and "12" not in facts_in("12 at")  # short tokens are not facts


def session() -> list[Message]:
    """A task, one tool output holding a once-seen number, 25 filler rounds, then the agent
    uses that number and the task's file again."""
    messages = [Message(role="system", content="You are an agent. Use src/system_only.py."),
                Message(role="user", content="Fix src/app/config.py so tests pass."),
                call(0, "cat src/app/config.py"),
                result(0, "LIMIT = 8191  # max_buffer_size\nsrc/app/config.py ok")]
    for i in range(1, 26):
        messages += [call(i, f"echo filler {i}"), result(i, f"filler {i}")]
    messages.append(Message(role="assistant", content="Set LIMIT 8191 in src/app/config.py."))
    return messages


def test_continuation_far_and_needles_on_a_known_session() -> None:
    messages = session()
    scorer = RetentionScorer(messages)
    last = len(messages) - 1
    facts = {f.text: f for f in scorer.facts}
    # The agent wrote both again at the end; both had appeared before.
    assert {"8191", "src/app/config.py"} <= set(facts)
    assert "src/system_only.py" not in facts  # the system prompt is no source
    due, far, needles = scorer.due(last)
    names = {scorer.facts[i].text for i in range(len(scorer.facts)) if due >> i & 1}
    assert {"8191", "src/app/config.py"} <= names
    far_names = {scorer.facts[i].text for i in range(len(scorer.facts)) if far >> i & 1}
    assert {"8191", "src/app/config.py"} <= far_names  # 50 messages back
    needle_names = {scorer.facts[i].text for i in range(len(scorer.facts))
                    if needles >> i & 1}
    assert "8191" in needle_names  # seen in one message only
    assert "src/app/config.py" not in needle_names  # seen in four

    full = scorer.score(messages[:last], last)
    assert full.facts_kept == full.facts_due > 0 and full.needles_kept == full.needles_due

    # A request that dropped the tool output still has the task, not the number.
    dropped = [m for m in messages[:last] if m.content != messages[3].content]
    lost = scorer.score(dropped, last)
    assert lost.facts_due == full.facts_due
    assert lost.facts_kept == full.facts_kept - 1
    assert lost.needles_kept == lost.needles_due - 1
    # A summary that kept the number brings it back; a paraphrase does not.
    kept = scorer.score([*dropped, Message(role="user", content="limit is 8191")], last)
    assert kept.facts_kept == full.facts_kept
    paraphrase = scorer.score([*dropped, Message(role="user", content="limit ~8k")], last)
    assert paraphrase.facts_kept == lost.facts_kept


def test_needles_via_history_search_are_an_upper_bound_for_policies_that_offer_it() -> None:
    messages = session()
    scorer = RetentionScorer(messages)
    last = len(messages) - 1
    dropped = [m for m in messages[:last] if m.content != messages[3].content]
    without = scorer.score(dropped, last)
    with_search = scorer.score(dropped, last, search=True)
    assert without.needles_searchable == without.needles_kept  # no search offered
    assert with_search.needles_searchable == with_search.needles_due  # found by search
    assert Counts(needles_due=4, needles_searchable=3).needles_with_search == 0.75


def test_near_facts_are_not_far() -> None:
    messages = [Message(role="user", content="Run pytest on tests/test_io.py please."),
                call(0, "pytest tests/test_io.py"), result(0, "1 failed: IOError in read_all"),
                Message(role="assistant", content="read_all raises IOError; fixing it.")]
    scorer = RetentionScorer(messages)
    due, far, _needles = scorer.due(3)
    assert due and not far  # everything was said in the last 20 messages


def test_retention_is_pooled_and_split_at_the_first_fold() -> None:
    summary = RetentionSummary.of([(Counts(facts_due=10, facts_kept=10), False),
                                   (Counts(facts_due=10, facts_kept=5), True),
                                   (Counts(facts_due=20, facts_kept=10), True)])
    assert summary.all.continuation == 25 / 40
    assert summary.after_first_fold is not None
    assert summary.after_first_fold.continuation == 15 / 30
    assert RetentionSummary.of([(Counts(facts_due=1, facts_kept=1), False)]
                               ).after_first_fold is None


def test_the_measure_shares_no_code_with_what_it_checks() -> None:
    """The engine's summary check and its probes must not be what grades it: the module
    imports nothing of the engine, the plugins or the probe score (import-linter forbids the
    other direction, pyproject.toml)."""
    tree = ast.parse((REPO / "src/ctxfold/replay/retention.py").read_text())
    imported = {node.module for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
    ours = {m for m in imported if m.startswith("ctxfold")}
    assert ours <= {"ctxfold.kernel.types", "ctxfold.capabilities.session_search"}, ours
    contracts = (REPO / "pyproject.toml").read_text()
    assert '"ctxfold.replay.retention"' in contracts
