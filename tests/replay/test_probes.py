"""Fidelity probes on hand-made sessions whose right answer is known."""

from __future__ import annotations

import json

import pytest

from ctxfold import Message, ToolCall
from ctxfold.engine.probes import WEIGHTS, FidelityScorer, RequestFidelity, extract_probes
from ctxfold.kernel.summary import wrap_summary
from ctxfold.replay.fidelity import FidelitySummary

TASK = ("Fix `parse_config` in src/config.py so that a limit of 4096 is accepted. "
        "Never modify the tests.\nYou must keep the public API unchanged.")


def session() -> list[Message]:
    call = ToolCall(id="c1", name="bash",
                    arguments=json.dumps({"command": "pytest -x tests/test_config.py"}))
    return [
        Message(role="system", content="You are a coding agent."),
        Message(role="user", content=TASK),                                          # 1
        Message(role="assistant", content="Running the tests.", tool_calls=(call,)),  # 2
        Message(role="tool", tool_call_id="c1", name="bash",                          # 3
                content="E   ValueError: limit 4096 above maximum\n1 failed, 3 passed in 0.2s"),
        Message(role="assistant", content="I will edit load_limits next."),          # 4
        Message(role="user", content="Thanks."),                                     # 5
        Message(role="assistant", content="Done."),                                  # 6
    ]


def kinds(probes) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in probes:
        out.setdefault(p.kind, []).append(p.text)
    return out


def test_probes_of_every_kind_are_drawn_from_where_they_belong() -> None:
    probes = extract_probes(session())
    found = kinds(probes)
    assert found["constraint"] == ["never modify the tests.",
                                   "you must keep the public api unchanged."]
    assert {"parse_config", "src/config.py", "4096"} <= set(found["task"])
    assert found["error"] == ["ValueError: limit 4096 above maximum"]
    assert found["command"] == ["pytest -x tests/test_config.py"]
    assert found["outcome"] == ["1 failed, 3 passed in 0.2s"]
    assert "tests/test_config.py" in found["path"]
    assert "load_limits" in found["identifier"]
    # A text is one probe, introduced where it first appears.
    assert len({p.text for p in probes}) == len(probes)
    intro = {p.text: p.introduced for p in probes}
    assert intro["parse_config"] == 1 and intro["load_limits"] == 4
    # the system prompt and the tool output's paths are not probes of the user's intent
    assert not any(p.introduced in (0,) for p in probes)


def test_everything_carried_is_full_retention_and_a_dropped_message_costs_its_probes() -> None:
    messages = session()
    scorer = FidelityScorer(extract_probes(messages))
    full = scorer.score(messages[:6], 6)
    assert full == RequestFidelity(1.0, 1.0)
    without_tool = [m for i, m in enumerate(messages[:6]) if i != 3]
    dropped = scorer.score(without_tool, 6)
    due = [p for p in scorer.probes if p.introduced < 6]
    lost = [p for p in due if p.introduced == 3 and p.text not in TASK
            and p.text not in messages[4].content]
    total = sum(p.weight for p in due)
    assert dropped.weighted == pytest.approx((total - sum(p.weight for p in lost)) / total)
    assert {p.kind for p in lost} == {"error", "outcome"}
    assert dropped.constraints == 1.0


def test_a_summary_that_keeps_the_text_retains_the_probe() -> None:
    messages = session()
    scorer = FidelityScorer(extract_probes(messages))
    summary = wrap_summary("## Standing facts & constraints\n- NEVER modify   the tests.\n"
                           "## Errors & fixes\n- ValueError: limit 4096 above maximum")
    request = [messages[0], summary, messages[5]]
    score = scorer.score(request, 6)
    carried = {p.text for p in scorer.probes if p.introduced < 6
               and (p.text in summary.content or p.text in messages[5].content
                    or p.text in messages[0].content)}
    assert "ValueError: limit 4096 above maximum" in carried
    # constraints match case- and whitespace-insensitively: one of two kept
    assert score.constraints == pytest.approx(0.5)
    assert 0 < score.weighted < 1


def test_only_probes_introduced_before_the_request_count() -> None:
    messages = session()
    scorer = FidelityScorer(extract_probes(messages))
    assert scorer.score(messages[:1], 1) == RequestFidelity(None, None)  # nothing said yet
    early = scorer.score(messages[:2], 2)  # only the task's probes are due
    assert early.weighted == 1.0
    assert scorer.score([messages[0]], 2).weighted == 0.0


def test_the_summary_of_a_policy_over_its_requests() -> None:
    scores = [RequestFidelity(None, None), RequestFidelity(1.0, 1.0),
              RequestFidelity(0.4, None), RequestFidelity(0.6, 0.5)]
    summary = FidelitySummary.of(scores)
    assert summary.mean == pytest.approx(2.0 / 3)
    assert summary.constraints == pytest.approx(0.75)
    assert summary.last == pytest.approx(0.6)
    assert summary.below_half == pytest.approx(1 / 3)
    assert FidelitySummary.of([RequestFidelity(None, None)]) == FidelitySummary()


def test_weights_follow_the_documented_table() -> None:
    assert WEIGHTS == {"constraint": 3, "task": 2, "error": 2, "command": 1, "outcome": 1,
                       "path": 1, "identifier": 1}


def test_a_command_with_quotes_is_found_in_the_message_that_ran_it() -> None:
    """The probe is the decoded argument; the message stores it JSON-escaped."""
    call = ToolCall(id="c1", name="bash",
                    arguments=json.dumps({"command": 'grep -n "limit value" src/config.py'}))
    messages = [Message(role="user", content="Look at the limit."),
                Message(role="assistant", tool_calls=(call,)),
                Message(role="tool", tool_call_id="c1", content="12: limit = 4096"),
                Message(role="assistant", content="Found it.")]
    probes = extract_probes(messages)
    assert 'grep -n "limit value" src/config.py' in kinds(probes)["command"]
    assert FidelityScorer(probes).score(messages[:3], 3).weighted == 1.0
