"""The fold path's effects as the engine performs them (``ContextManager`` with a
one-token-per-character estimator): what moves the transcript during a run, what an
install then does, and which errors reach the caller. Regression tests of the review of the
one-module fold path (issue 26)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import pytest

from ctxfold import (
    Config,
    Message,
    ProviderError,
    StoreError,
    SummaryRequest,
    SummaryResult,
    ToolCall,
    hookimpl,
    open_session,
)
from ctxfold.testing import CharEstimator, RecordingSummarizer


class NoPrune:
    def prune(self, view: Sequence[Message]) -> None:
        return None


class ThreeQuarters:
    """Cuts every tool result to three quarters of its length."""

    def prune(self, view: Sequence[Message]) -> tuple[list[Message], int]:
        out = [attrs.evolve(m, content=m.content[: len(m.content) * 3 // 4], raw_content=None)
               if m.role == "tool" else m for m in view]
        return out, sum(1 for m in view if m.role == "tool")


class Scripted(RecordingSummarizer):
    """A recording summarizer that first runs ``before`` for each request, in order."""

    def __init__(self, *before: Callable[[SummaryRequest], None]) -> None:
        super().__init__()
        self.steps = list(before)
        self.before = self._next

    def _next(self, request: SummaryRequest) -> None:
        if self.steps:
            self.steps.pop(0)(request)


def session(tmp_path: Path, summarizer: object, *, ratio: float = 0.5,
            pruner: object | None = None, rounds: int = 10, size: int = 800):
    config = Config()
    config = attrs.evolve(
        config, agent=attrs.evolve(config.agent, compact_ratio=ratio),
        provider=attrs.evolve(config.provider, context_window=10_000),
        store=attrs.evolve(config.store, path=str(tmp_path / "s")))
    cm = open_session("s", config=config, estimator=CharEstimator(), pruner=pruner or NoPrune(),
                      summarizer=summarizer, workspace="w", offer_capability=False)
    cm.append(Message(role="system", content="s"), Message(role="user", content="task"))
    for i in range(rounds):
        cm.append(Message(role="assistant", content="a" * 10,
                          tool_calls=(ToolCall(id=f"c{i}", name="bash", arguments="{}"),)),
                  Message(role="tool", content="r" * size, tool_call_id=f"c{i}", name="bash"))
    return cm


def test_an_append_between_two_folds_of_one_run_is_kept_and_the_second_lands(
        tmp_path: Path) -> None:
    """Above the hard ceiling one run folds twice; a message appended right after the first
    install (here by the install hook) is in the view the second fold works from, so the
    second install lands."""
    cm = session(tmp_path, RecordingSummarizer(), rounds=14)  # above the hard ceiling

    class Appender:
        calls = 0

        @hookimpl
        def ctxfold_after_install(self, session_id: str, receipt: object) -> None:
            Appender.calls += 1
            if Appender.calls == 1:
                cm.append(Message(role="user", content="MEANWHILE"))

    cm._parts.registry.pm.register(Appender())
    prepared = cm.prepare()
    assert prepared.action == "summary" and Appender.calls == 2
    receipt = cm.state.last_receipt
    assert receipt is not None and receipt.status == "applied"
    assert any(m.content == "MEANWHILE" for m in prepared.messages)


def test_a_message_appended_during_a_failed_summary_is_never_folded_away(
        tmp_path: Path) -> None:
    """The summary fails after a message was appended; the prune made before it would cover
    the grown transcript with a view that lacks the message, so it loses instead."""

    def append_then_fail(_request: SummaryRequest) -> None:
        cm.append(Message(role="user", content="MEANWHILE"))
        raise ProviderError("down")

    cm = session(tmp_path, Scripted(append_then_fail), ratio=0.6, pruner=ThreeQuarters(),
                 rounds=8, size=1100)
    prepared = cm.prepare()
    assert any(m.content == "MEANWHILE" for m in prepared.messages)
    assert any(m.content == "MEANWHILE" for m in cm.view())


def test_a_rewind_during_the_summary_makes_the_install_lose(tmp_path: Path) -> None:
    """The transcript the run folds is replaced (a rewind) while the summary is asked for:
    nothing is installed over it."""
    cm = session(tmp_path, Scripted(lambda _request: cm.rewind(len(cm.canonical) - 2)))
    prepared = cm.prepare()
    assert prepared.action == "blocked" and cm.state.projection is None
    receipt = cm.state.last_receipt
    assert receipt is not None and "context changed" in receipt.reason


def test_a_failed_re_read_after_a_lost_install_reaches_the_caller_unapplied(
        tmp_path: Path) -> None:
    """The store fails while the session is re-read after a lost install: the error is the
    caller's, and nothing of the run (its summary count, its latches) is applied."""

    def append_and_break(_request: SummaryRequest) -> None:
        cm.append(Message(role="user", content="meanwhile"))

        def unreachable() -> None:
            raise StoreError("store unreachable")

        cm._committer.reload = unreachable

    cm = session(tmp_path, Scripted(append_and_break))
    with pytest.raises(StoreError, match="unreachable"):
        cm.prepare()
    assert cm.summary_calls == 0


def test_the_summary_result_is_what_the_summarizer_returned(tmp_path: Path) -> None:
    summarizer = RecordingSummarizer([SummaryResult(text="## Goal\n- exactly this")])
    cm = session(tmp_path, summarizer)
    assert cm.prepare().action == "summary"
    assert any("exactly this" in m.content for m in cm.view())
