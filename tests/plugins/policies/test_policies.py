"""Behaviour of each built-in replay policy on small synthetic sessions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest

from ctxfold import Message, PolicyOptions, RequestShape, ToolCall
from ctxfold.kernel.summary import is_summary_message
from ctxfold.plugins.policies._common import scaled
from ctxfold.plugins.policies.codex_like import CodexLikePolicy
from ctxfold.plugins.policies.masking import MaskingPolicy
from ctxfold.plugins.policies.opencode_like import CLEARED, OpencodeLikePolicy
from ctxfold.plugins.policies.openhands_like import OpenHandsLikePolicy
from ctxfold.plugins.policies.truncate_oldest import TruncateOldestPolicy
from ctxfold.plugins.summarizers.extractive import ExtractiveSummarizer
from ctxfold.testing import CharEstimator


def setup(tmp_path: Path, window: int, ratio: float = 0.8) -> PolicyOptions:
    return PolicyOptions(tools=(), window=window, compact_ratio=ratio, estimator=CharEstimator(),
                       summarizer=ExtractiveSummarizer(), workdir=tmp_path)


def session(rounds: int, result_size: int = 100) -> list[Message]:
    out = [Message(role="system", content="S" * 20), Message(role="user", content="Fix the bug.")]
    for i in range(rounds):
        call = ToolCall(id=f"c{i}", name="bash", arguments=json.dumps({"command": f"ls {i}"}))
        out.append(Message(role="assistant", content=f"step {i}", tool_calls=(call,)))
        out.append(Message(role="tool", content=f"{i}:" + "x" * result_size, tool_call_id=f"c{i}",
                           name="bash"))
    return out


def drive(policy: object, messages: Sequence[Message]) -> list[tuple[Message, ...]]:
    """Feed messages; collect the request before each assistant message."""
    requests = []
    for m in messages:
        if m.role == "assistant":
            requests.append(policy.request().messages)  # type: ignore[attr-defined]
        policy.observe(m)  # type: ignore[attr-defined]
    return requests


def assert_no_orphans(request: Sequence[Message]) -> None:
    called: set[str] = set()
    for m in request:
        if m.role == "assistant":
            called.update(c.id for c in m.tool_calls)
        if m.role == "tool":
            assert m.tool_call_id in called, f"orphaned tool result {m.tool_call_id}"


def test_masking_keeps_exactly_the_last_ten_tool_results(tmp_path: Path) -> None:
    policy = MaskingPolicy(setup(tmp_path, 1_000_000))
    for m in session(15):
        policy.observe(m)
    request = policy.request()
    tools = [m for m in request.messages if m.role == "tool"]
    verbatim = [m for m in tools if m.content.endswith("x" * 100)]
    assert len(tools) == 15
    assert [m.tool_call_id for m in verbatim] == [f"c{i}" for i in range(5, 15)]
    assert all(m.content.startswith("[Old tool result omitted") for m in tools[:5])
    assert request.installed and request.prunes == 1


def test_truncate_oldest_never_orphans_and_fits_under_trigger(tmp_path: Path) -> None:
    s = setup(tmp_path, window=2000)
    policy = TruncateOldestPolicy(s)
    requests = drive(policy, session(40, result_size=150))
    assert any(len(r) < 20 for r in requests)  # it did truncate
    for request in requests:
        assert_no_orphans(request)
        assert request[0].role == "system"
        assert CharEstimator().estimate(RequestShape(list(request))) < s.trigger


def test_openhands_like_keeps_first_four_and_one_summary(tmp_path: Path) -> None:
    policy = OpenHandsLikePolicy(setup(tmp_path, 10_000_000), keep_first=4, max_size=20)
    messages = session(30, result_size=10)
    requests = drive(policy, messages)
    condensed = [r for r in requests if any(is_summary_message(m) for m in r)]
    assert condensed, "the condenser never ran"
    for request in condensed:
        assert list(request[:4]) == messages[:4]
        assert is_summary_message(request[4])
        assert sum(1 for m in request if is_summary_message(m)) == 1
        assert len(request) <= 20 + 1
        assert_no_orphans(request)


def test_codex_like_triggers_at_ninety_percent(tmp_path: Path) -> None:
    window = 1000
    policy = CodexLikePolicy(setup(tmp_path, window))
    messages = [Message(role="system", content="S" * 100), Message(role="user", content="U" * 100)]
    for m in messages:
        policy.observe(m)
    filler = Message(role="tool", content="t" * 679, tool_call_id="c0")
    policy.observe(Message(role="assistant", content="a", tool_calls=(ToolCall("c0", "bash"),)))
    policy.observe(filler)  # 100 + 100 + 1 + 679 = 880 < 900
    first = policy.request()
    assert not first.summaries and len(first.messages) == 4
    policy.observe(Message(role="assistant", content="b" * 25))  # 905 >= 900
    second = policy.request()
    assert len(second.summaries) == 1 and second.installed
    roles = [m.role for m in second.messages]
    assert roles == ["system", "user", "user"]  # system, kept user message, summary
    assert second.messages[1].content == "U" * 100 and is_summary_message(second.messages[2])


def test_opencode_like_prunes_old_tool_outputs_only_when_enough_is_freed(tmp_path: Path) -> None:
    window = 200_000
    policy = OpencodeLikePolicy(setup(tmp_path, window))
    # 10 results of 5000 tokens: 40k protected, the 10k beyond it is below the 20k minimum.
    for m in session(10, result_size=4998):
        policy.observe(m)
    assert policy.request().prunes == 0
    for m in session(16, result_size=4998)[22:]:
        policy.observe(m)
    request = policy.request()
    cleared = [m for m in request.messages if m.role == "tool" and m.content == CLEARED]
    assert request.prunes == 1 and len(cleared) >= 4
    assert_no_orphans(request.messages)


def test_scaling_rule_is_proportional_below_the_reference_window() -> None:
    assert scaled(40_000, 64_000) == 12_800
    assert scaled(40_000, 400_000) == 40_000


@pytest.mark.parametrize("name", ["ctxfold", "append-only", "truncate-oldest", "codex-like",
                                  "opencode-like", "openhands-like", "masking"])
def test_every_policy_is_registered_with_a_description(name: str) -> None:
    from ctxfold import Registry

    registry = Registry.from_config(load_entry_points=False)
    spec = registry.get("policy", name)
    assert spec.description and spec.source.startswith("builtin:ctxfold.plugins.policies.")


def test_a_briefing_length_the_request_asks_for_is_kept_else_the_replay_default(
        tmp_path: Path) -> None:
    from ctxfold.kernel.summary import build_summary_request
    from ctxfold.plugins.policies._common import with_target

    options = attrs.evolve(setup(tmp_path, 64_000), summary_tokens=2048)
    region = [Message(role="user", content="task")]
    asks = build_summary_request(None, region, (), window=64_000, target_tokens=3_744)
    silent = build_summary_request(None, region, (), window=64_000)
    assert with_target(asks, options).target_tokens == 3_744  # what ctxfold's request asks
    assert with_target(silent, options).target_tokens == 2048  # a peer's: the one default
