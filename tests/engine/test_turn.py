"""Overflow recovery (design §7.3) with a scripted provider: clip-and-retry, overflow prepare."""

from __future__ import annotations

import pytest
from tests.engine.test_manager import rounds, seed

from ctxfold import (
    ChatRequest,
    ChatResponse,
    CompactionRequiredError,
    ContextLimitError,
    Message,
    Usage,
)
from ctxfold.testing import RecordingSummarizer


class ScriptedProvider:
    name = "scripted"
    context_window = 1_000_000
    cache_ttl_minutes = 1440
    def __init__(self, outcomes: list) -> None:
        self.outcomes = outcomes
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return ChatResponse(message=Message(role="assistant", content=outcome),
                            usage=Usage(prompt_tokens=1000, completion_tokens=3))


def test_room_left_means_one_clipped_retry(open_session) -> None:
    cm = open_session(window=100_000, ratio=0.8, summarizer=RecordingSummarizer())
    seed(cm)
    overflow = ContextLimitError("too long", window=60_000, prompt=20_000, completion=64_000)
    provider = ScriptedProvider([overflow, "done"])
    response = cm.complete(provider)
    assert response.message.content == "done"
    assert len(provider.requests) == 2
    assert provider.requests[1].max_output_tokens == 60_000 - 20_000 - 8192
    assert cm.window == 60_000  # learned: effective = min(configured, learned)
    assert cm.canonical[-1].content == "done"


def test_no_room_means_one_overflow_prepare_then_one_retry(open_session) -> None:
    summarizer = RecordingSummarizer()
    cm = open_session(window=100_000, ratio=0.8, summarizer=summarizer)
    seed(cm)
    rounds(cm, 30, 1_500)
    prompt = cm.estimate()
    overflow = ContextLimitError("too long", window=prompt, prompt=prompt, completion=1000)
    provider = ScriptedProvider([overflow, "done"])
    cm.complete(provider)
    assert len(provider.requests) == 2
    assert len(summarizer.requests) <= 1
    assert cm.state.projection is not None
    assert len(provider.requests[1].messages) < len(provider.requests[0].messages)


def test_second_overflow_is_a_clear_error(open_session) -> None:
    cm = open_session(window=100_000, ratio=0.8, summarizer=RecordingSummarizer())
    seed(cm)
    overflow = ContextLimitError("too long", window=60_000, prompt=20_000, completion=64_000)
    provider = ScriptedProvider([overflow, overflow, "never"])
    with pytest.raises(CompactionRequiredError, match="after one recovery retry"):
        cm.complete(provider)
    assert len(provider.requests) == 2
    assert cm.canonical[-1].role == "user"  # nothing half-written


def test_overflow_prepare_that_cannot_advance_fails_without_retry(open_session) -> None:
    cm = open_session(window=100_000, ratio=0.8, summarizer=RecordingSummarizer())
    seed(cm)  # nothing to fold
    overflow = ContextLimitError("too long", window=50, prompt=60, completion=10)
    provider = ScriptedProvider([overflow, "never"])
    with pytest.raises(CompactionRequiredError):
        cm.complete(provider)
    assert len(provider.requests) == 1


def test_overflow_without_numbers_learns_the_window_from_the_request(open_session) -> None:
    summarizer = RecordingSummarizer()
    cm = open_session(window=200_000, ratio=0.8, summarizer=summarizer)
    seed(cm)
    rounds(cm, 30, 1_500)
    prompt = cm.estimate()
    provider = ScriptedProvider([ContextLimitError("context_length_exceeded"), "done"])
    cm.complete(provider)
    assert cm.window <= prompt
    assert len(summarizer.requests) == 1 and cm.state.projection is not None
    assert len(provider.requests) == 2


def test_local_only_messages_do_not_shift_fold_coverage(open_session) -> None:
    """Folded messages are never sent again: coverage maps view positions to canonical."""
    from ctxfold import ToolCall

    cm = open_session(window=30_000, ratio=0.5, summarizer=RecordingSummarizer())
    seed(cm)
    for i in range(30):
        cm.append(Message(role="assistant", content=f"step {i}",
                          tool_calls=(ToolCall(id=f"c{i}", name="bash", arguments="{}"),)),
                  Message(role="tool", content=f"out {i} " * 400, tool_call_id=f"c{i}",
                          name="bash"),
                  Message(role="user", content=f"note {i}", local_only=True))
    prepared = cm.prepare()
    assert prepared.action == "summary"
    sent_ids = [m.tool_call_id for m in prepared.messages if m.role == "tool"]
    summary_request = cm.summarizer.requests[0]
    folded_ids = {m.tool_call_id for m in summary_request.messages if m.role == "tool"}
    assert folded_ids and not folded_ids & set(sent_ids)
    # Nothing visible is lost either: every call is folded or still sent.
    assert folded_ids | set(sent_ids) == {f"c{i}" for i in range(30)}
