"""``ctxfold-boundary``: the engine whose model calls ``session:fold`` at the task boundaries a
session marks, on a small synthetic session of several tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.replay.test_runner import TemplateEstimator, tiny_replay

from ctxfold import Config, Message, PolicyOptions, Registry, ToolCall, ToolSchema
from ctxfold.kernel.summary import is_summary_message
from ctxfold.plugins.policies.ctxfold_engine import BoundaryCtxfoldPolicy, is_task_boundary
from ctxfold.plugins.summarizers.extractive import ExtractiveSummarizer
from ctxfold.replay.runner import build_policies

BASH = ToolSchema(name="bash", description="Run a command.",
                  parameters={"type": "object", "properties": {"command": {"type": "string"}}})
WINDOW = 24_000


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry.from_config(load_entry_points=False)


def task(n: int, rounds: int, size: int = 1500) -> list[Message]:
    out = [Message(role="user", content=f"Task {n}: fix module m{n}.")]
    for i in range(rounds):
        out += [Message(role="assistant", tool_calls=(ToolCall(
                    id=f"c{n}_{i}", name="bash",
                    arguments=json.dumps({"command": f"cat m{n}_{i}.py"})),)),
                Message(role="tool", tool_call_id=f"c{n}_{i}",
                        content=f"m{n} part {i}\n" + "word " * (size // 5))]
    return [*out, Message(role="assistant", content=f"Task {n} is done.")]


def session() -> list[Message]:
    """A small opening task (its boundary comes on a small view), then three large tasks;
    the harness's own feedback after one reply (origin ``host``) is no boundary."""
    return [Message(role="system", content="You are a coding agent."),
            *task(0, 1, 200), *task(1, 8), *task(2, 6),
            Message(role="user", origin="host", content="Reminder: run the tests."),
            Message(role="assistant", content="The tests pass."), *task(3, 2)]


def drive(policy: Any, messages: list[Message]) -> list[tuple[int, Any]]:
    """The replay's loop: a request before every assistant message, then observe it."""
    requests = []
    for index, message in enumerate(messages):
        if message.role == "assistant":
            requests.append((index, policy.request()))
        policy.observe(message)
    return requests


def policies(registry: Registry, tmp_path: Path, *names: str) -> dict[str, Any]:
    options = PolicyOptions(tools=(BASH,), window=WINDOW, compact_ratio=0.8,
                            estimator=TemplateEstimator(), summarizer=ExtractiveSummarizer(),
                            workdir=tmp_path, session_name="tasks")
    return build_policies(names, registry, Config(), options)


def test_the_marker_is_a_persons_message_after_a_reply_without_tool_calls() -> None:
    reply = Message(role="assistant", content="done")
    calling = Message(role="assistant", tool_calls=(ToolCall(id="c", name="bash",
                                                             arguments="{}"),))
    ask = Message(role="user", content="next")
    assert is_task_boundary(reply, ask)
    assert not is_task_boundary(None, ask)  # the first task
    assert not is_task_boundary(calling, ask)
    assert not is_task_boundary(reply, Message(role="user", origin="host", content="next"))
    assert not is_task_boundary(ask, ask)


def test_it_folds_at_large_boundaries_only(registry: Registry, tmp_path: Path) -> None:
    messages = session()
    policy = policies(registry, tmp_path, "ctxfold-boundary")["ctxfold-boundary"]
    assert isinstance(policy, BoundaryCtxfoldPolicy)
    requests = drive(policy, messages)
    answers = [json.loads(a) for a in policy.fold_answers]
    # Boundaries: before tasks 1, 2 and 3 (the host's reminder is none); task 1's came on a
    # view under half the trigger, so it was refused and cost nothing.
    assert [a["folded"] for a in answers] == [False, True, True]
    assert answers[0]["tokens_before"] < answers[0]["fold_min_tokens"]
    folded = [(i, r) for i, r in requests if r.installed]
    starts = [messages.index(m) + 1 for m in messages
              if m.role == "user" and m.content.startswith(("Task 2", "Task 3"))]
    # Each fold came with the first request of its task, billed with it, and that request
    # carries the summary, then the new task verbatim.
    assert [i for i, _r in folded] == starts
    for _i, request in folded:
        assert len(request.summaries) == 1
        assert sum(map(is_summary_message, request.messages)) == 1
        assert request.messages[-1].content.startswith("Task ")
        assert request.tools[-1].name == "use_capability"  # offered from the first request
    assert requests[0][1].tools[-1].name == "use_capability"


def test_it_runs_in_the_replay_beside_ctxfold(registry: Registry) -> None:
    assert "ctxfold-boundary" in registry.available("policy")  # so in --policy all
    result = tiny_replay(registry, session(), window=WINDOW + 4096, reserve_output=4096,
                         names=("ctxfold", "ctxfold-boundary"))
    plain, boundary = result.policies["ctxfold"], result.policies["ctxfold-boundary"]
    assert not boundary.failed and boundary.canonical_intact
    assert boundary.prefix_stable_between_installs
    # ctxfold folds under pressure, inside task 2; the boundary policy folds between tasks
    # and its views stay smaller.
    assert boundary.summaries == 2 and plain.summaries >= 1
    assert boundary.max_request_tokens < plain.max_request_tokens
