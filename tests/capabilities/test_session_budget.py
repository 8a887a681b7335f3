"""``session:budget`` and ``session:fold``: the model sees its budget and folds at a task
boundary through ``use_capability``; the fold is ``compact()``'s, refused on a small view, and
never drops the pending call or its answer."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from tests.conftest import AsyncFace

from ctxfold import Message, SummarizerError, ToolCall
from ctxfold.capabilities import session_budget
from ctxfold.capabilities.tool import handle_use_capability
from ctxfold.kernel.summary import is_summary_message
from ctxfold.testing import RecordingSummarizer

WINDOW = 20_000


def call(capability: str, **arguments: object) -> dict[str, Any]:
    return {"action": "call", "capability_id": capability, "arguments": arguments}


def ask(cm: Any, capability: str, call_id: str = "cap", **arguments: object) -> str:
    """The model calls ``capability``: its call is appended first (as ``complete()`` does),
    then answered through ``answer`` (sync face) or ``aanswer`` (async face), then the answer
    is appended."""
    tool_call = ToolCall(id=call_id, name="use_capability",
                         arguments=json.dumps(call(capability, **arguments)))
    cm.append(Message(role="assistant", tool_calls=(tool_call,)))
    if isinstance(cm, AsyncFace):
        reply = asyncio.run(cm._cm.aanswer(tool_call))
    else:
        reply = cm.answer(tool_call)
    assert reply is not None and reply["tool_call_id"] == call_id
    cm.append(reply)
    return str(reply["content"])


def task(cm: Any, n: int, rounds: int, size: int = 3200) -> None:
    """One task: the user asks, the agent works ``rounds`` tool rounds, then answers."""
    cm.append(Message(role="user", content=f"Task {n}: fix module m{n}."))
    for i in range(rounds):
        cm.append(Message(role="assistant", tool_calls=(
            ToolCall(id=f"t{n}_{i}", name="read", arguments=json.dumps({"path": f"m{n}.py"})),)))
        cm.append(Message(role="tool", tool_call_id=f"t{n}_{i}",
                          content=f"m{n} part {i} " + "z" * size))
    cm.append(Message(role="assistant", content=f"Task {n} is done: m{n} fixed."))


@pytest.fixture
def session(open_session):
    def make(summarizer: RecordingSummarizer | None = None) -> Any:
        cm = open_session(window=WINDOW, ratio=0.5, summarizer=summarizer or
                          RecordingSummarizer())
        cm.append(Message(role="system", content="You are a coding agent."))
        return cm
    return make


def test_budget_reports_the_window_the_trigger_and_what_is_left(session) -> None:
    cm = session()
    task(cm, 1, 3)
    answer = ask(cm, "session:budget")
    budget = json.loads(answer)
    assert len(answer) < 400
    # The estimate is the view's before the call: the call and its answer came after it.
    assert budget["window"] == WINDOW and budget["input_budget"] == WINDOW - 256
    assert budget["trigger_tokens"] == cm.trigger_tokens == 10_000
    assert 0 < budget["prompt_tokens"] < cm.view_estimate()[1]
    assert budget["tokens_left"] == 10_000 - budget["prompt_tokens"]
    assert budget["fold_min_tokens"] == 5_000
    assert budget["checkpoints"] == 0 and budget["folded_messages"] == 0
    assert budget["messages"] == 1 + 8 + 1  # the call was appended before the answer
    cm.compact()
    after = json.loads(ask(cm, "session:budget", call_id="cap2"))
    assert after["checkpoints"] == 1
    assert after["folded_messages"] == cm.state.projection.covered_count > 0
    assert after["prompt_tokens"] < budget["prompt_tokens"]


def test_a_fold_under_half_the_trigger_is_refused_and_costs_nothing(session) -> None:
    summarizer = RecordingSummarizer()
    cm = session(summarizer)
    task(cm, 1, 3)
    state = cm.state
    answer = json.loads(ask(cm, "session:fold", reason="task 1 done"))
    assert answer["folded"] is False and "ctxfold folds at the trigger" in answer["why"]
    assert answer["tokens_before"] < answer["fold_min_tokens"] == 5_000
    assert summarizer.requests == [] and cm.state.projection == state.projection


def test_a_fold_at_a_task_boundary_keeps_the_pending_call_and_its_answer(session) -> None:
    summarizer = RecordingSummarizer()
    cm = session(summarizer)
    task(cm, 1, 4)
    task(cm, 2, 4)
    cm.append(Message(role="user", content="Task 3: fix module m3."))
    before = cm.view_estimate()[1]
    assert before >= 5_000  # above half the trigger, below the trigger: no automatic fold
    assert cm.prepare().action.value == "none"
    at = len(cm.canonical)  # where the model's session:fold call lands
    answer = json.loads(ask(cm, "session:fold", reason="tasks 1-2 done", keep="m2 layout"))
    assert answer["folded"] is True and answer["checkpoints"] == 1
    assert before < answer["tokens_before"] < before + 100  # the call is in the view
    assert answer["tokens_after"] < before / 2
    # The manual path, with the model's note as the summary's focus.
    assert cm.state.last_receipt.trigger == "manual"
    assert len(summarizer.requests) == 1
    assert "m2 layout" in summarizer.requests[0].focus
    assert "tasks 1-2 done" in summarizer.requests[0].focus
    # The checkpoint covers messages before the call only: the new task, the call and the
    # answer follow it verbatim in the next request.
    projection = cm.state.projection
    assert projection.covered_count <= at - 1
    prepared = cm.prepare()
    assert prepared.action.value == "none"
    assert sum(map(is_summary_message, prepared.messages)) == 1
    assert [m.role for m in prepared.messages[-3:]] == ["user", "assistant", "tool"]
    assert prepared.messages[-3].content == "Task 3: fix module m3."
    assert prepared.messages[-2].tool_calls[0].name == "use_capability"
    assert prepared.messages[-1].tool_call_id == "cap"
    # Nothing of the transcript changed but the appends; the prefix stays byte-stable.
    assert len(cm.canonical) == at + 2
    cm.append(Message(role="assistant", content="On it."))
    again = cm.prepare()
    assert again.messages[:len(prepared.messages)] == prepared.messages
    # Folded: under half the trigger now, so a second fold is refused.
    second = json.loads(ask(cm, "session:fold", call_id="cap2"))
    assert second["folded"] is False and len(summarizer.requests) == 1


def test_a_failed_summary_is_answered_not_raised(session) -> None:
    cm = session(RecordingSummarizer([SummarizerError("upstream said no")]))
    task(cm, 1, 4)
    task(cm, 2, 4)
    answer = json.loads(ask(cm, "session:fold"))
    assert answer["folded"] is False and "upstream said no" in answer["why"]
    assert cm.state.projection is None


@pytest.mark.parametrize(("capability", "arguments", "says"), [
    ("session:budget", {"x": 1}, "session:budget takes no arguments"),
    ("session:fold", {"why": "x"}, "unknown argument(s) why for session:fold"),
    ("session:fold", {"keep": 5}, "argument keep of session:fold must be a string"),
    ("session:fold", {"reason": "r" * 501}, "argument reason of session:fold has 501"),
])
def test_bad_arguments_are_answered_with_what_is_wrong(session, capability, arguments,
                                                       says) -> None:
    cm = session()
    task(cm, 1, 4)
    task(cm, 2, 4)
    answer = ask(cm, capability, **arguments)
    assert answer.startswith("error: ") and says in answer
    assert cm.state.projection is None


def test_both_are_listed_and_need_a_live_session() -> None:
    listed = json.loads(handle_use_capability([], {"action": "list"}))["capabilities"]
    assert [c["id"] for c in listed][-2:] == ["session:budget", "session:fold"]
    answer = handle_use_capability([], call("session:budget"))
    assert answer.startswith("error: session:budget needs a live session")


def test_the_fold_focus_joins_keep_and_reason_on_single_lines() -> None:
    request = session_budget.fold_request({"reason": "done\nwith 1", "keep": " a  b "})
    assert request.focus == "a b\n(The agent asked for this fold: done with 1)"
    assert session_budget.fold_request({}).focus is None


def _fold_ledger(cm: Any) -> Any:
    return [t for t in cm.state.telemetry if t.kind == "install"][-1].ledger


def test_a_model_fold_is_measured_by_the_first_request_sent_on_it(tmp_path: Any) -> None:
    """The proxy answers the fold before it observes the usage of the request that asked
    for it: that usage is the old view's, not the fold's first request."""
    from tests.conftest import make_config

    from ctxfold import Usage, open_session

    cm = open_session("s", config=make_config(tmp_path, window=20_000, ratio=0.5),
                      summarizer=RecordingSummarizer())
    cm.append(Message(role="system", content="sys"))
    task(cm, 1, 4)
    task(cm, 2, 4)
    cm.append(Message(role="user", content="Task 3"))
    cm.prepare()  # sent: its answer asks for the fold
    tc = ToolCall(id="cap", name="use_capability", arguments=json.dumps(call("session:fold")))
    answer = cm.use_capability(json.loads(tc.arguments))
    assert json.loads(answer)["folded"] is True
    cm.append(Message(role="assistant", tool_calls=(tc,)),
              Message(role="tool", tool_call_id="cap", content=answer))
    cm.observe_usage(Usage(prompt_tokens=6700, completion_tokens=30, cache_hit_tokens=6500,
                           cache_miss_tokens=200))  # the request before the fold
    entry = _fold_ledger(cm)
    assert entry.requests == 0 and entry.estimated  # not measured by the old view's usage
    sent = cm.prepare()
    cm.observe_usage(Usage(prompt_tokens=sent.tokens, completion_tokens=10,
                           cache_hit_tokens=100, cache_miss_tokens=sent.tokens - 100))
    entry = _fold_ledger(cm)
    assert (entry.requests, entry.estimated, entry.read) == (1, False, 100)
    cm.prepare()
    assert _fold_ledger(cm).requests == 2


def test_a_model_cannot_fold_its_own_summary_again_and_again(tmp_path: Any) -> None:
    """A low ratio makes the checkpoint itself over half the trigger: without the growth rule
    every call re-summarised the last summary (38 summaries in 60 calls)."""
    from tests.conftest import make_config

    from ctxfold import SummaryResult, open_session

    calls: list[int] = []

    class Verbose:
        def summarize(self, request: Any) -> SummaryResult:
            calls.append(1)
            return SummaryResult(text="## Goal\n- " + " ".join(
                f"fact{i}-{len(calls)}" for i in range(900)))

    cm = open_session("s", config=make_config(tmp_path, window=20_000, ratio=0.3),
                      summarizer=Verbose())
    cm.append(Message(role="system", content="You are a coding agent."))
    task(cm, 1, 4)
    task(cm, 2, 4)
    answers = []
    for k in range(10):
        tc = ToolCall(id=f"cap{k}", name="use_capability",
                      arguments=json.dumps(call("session:fold")))
        cm.append(Message(role="assistant", tool_calls=(tc,)))
        reply = cm.answer(tc)
        assert reply is not None
        answers.append(json.loads(reply["content"]))
        cm.append(reply)
    assert len(calls) == 1 and answers[0]["folded"] is True
    assert all(not a["folded"] and "since the last checkpoint" in a["why"]
               for a in answers[1:])


def test_an_error_in_the_fold_itself_is_raised_not_blamed_on_the_model(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.conftest import make_config

    from ctxfold import open_session

    cm = open_session("s", config=make_config(tmp_path, window=20_000, ratio=0.5),
                      summarizer=RecordingSummarizer())
    cm.append(Message(role="system", content="sys"))
    task(cm, 1, 4)
    task(cm, 2, 4)

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise ValueError("a hook broke")

    monkeypatch.setattr(cm, "compact", broken)
    monkeypatch.setattr(cm, "acompact", broken)
    tc = ToolCall(id="cap", name="use_capability", arguments=json.dumps(call("session:fold")))
    with pytest.raises(ValueError, match="a hook broke"):
        cm.answer(tc)
    with pytest.raises(ValueError, match="a hook broke"):
        asyncio.run(cm.aanswer(tc))
    # the model's own bad input is still answered as text
    bad = ToolCall(id="bad", name="use_capability",
                   arguments=json.dumps(call("session:fold", keep=5)))
    reply = cm.answer(bad)
    assert reply is not None and reply["content"].startswith("error: ")
