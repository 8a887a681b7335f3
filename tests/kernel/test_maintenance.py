"""``prepare()``'s decisions (design §2.4, §2.5), on ``maintain`` over a frozen context.

Each test builds a :class:`MaintenanceContext` by hand (a one-token-per-character estimator,
an in-memory sidecar behind the engine's committer) and drives the generator, performing its
steps here, so a decision is tested without a store or a session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import attrs
import pytest

from ctxfold import (
    Action,
    CompactionRequiredError,
    Message,
    ProviderError,
    RequestShape,
    SidecarState,
    StaleContextError,
    SummaryFailedError,
    SummaryRequest,
    SummaryResult,
    ToolCall,
)
from ctxfold.engine import driving
from ctxfold.engine.committer import Committer
from ctxfold.kernel import maintenance
from ctxfold.kernel.maintenance import (
    Commit,
    Latches,
    MaintenanceContext,
    Reread,
    Step,
    Stored,
    Summarize,
)
from ctxfold.kernel.types import Trigger
from ctxfold.kernel.view import visible_view
from ctxfold.testing import CharEstimator


class NoPrune:
    def prune(self, view: Sequence[Message]) -> tuple[list[Message], int] | None:
        return None


class HalveTools:
    def prune(self, view: Sequence[Message]) -> tuple[list[Message], int] | None:
        out = [Message(role="tool", content=m.content[: len(m.content) // 2],
                       tool_call_id=m.tool_call_id) if m.role == "tool" else m for m in view]
        return out, sum(1 for m in view if m.role == "tool")


def session(rounds: int, size: int) -> list[Message]:
    out = [Message(role="system", content="s"), Message(role="user", content="task")]
    for i in range(rounds):
        out.append(Message(role="assistant", content="a" * 10,
                           tool_calls=(ToolCall(id=f"c{i}", name="bash"),)))
        out.append(Message(role="tool", content="r" * size, tool_call_id=f"c{i}"))
    return out


@attrs.frozen
class Case:
    """A hand-built context and the committer that performs its commits."""

    ctx: MaintenanceContext
    committer: Committer


def context(canonical: list[Message], committer: Committer, *, trigger: Trigger = "pressure",
            window: int = 10_000, ratio: float = 0.5, turn: int = 1,
            latches: Latches | None = None, pruner: object | None = None) -> Case:
    return Case(MaintenanceContext(
        session_id="s", trigger=trigger, focus=None, window=window,
        trigger_tokens=int(window * ratio), turn=turn, latches=latches or Latches(), tools=(),
        canonical=canonical, estimator=CharEstimator(), pruner=pruner or NoPrune(),
        count=lambda m: len(m.content), state=committer.state,
        clock=committer.clock,
    ), committer)


def performer(case: Case, summarize: object) -> object:
    """Perform a maintenance step as the engine does, against the case's committer."""

    def perform(step: Step) -> object:
        if isinstance(step, Summarize):
            return summarize(step.request)  # type: ignore[operator]
        if isinstance(step, Commit):
            return case.committer.commit(step)
        if isinstance(step, Reread):
            return Stored(case.ctx.canonical, case.committer.state)
        return None  # AfterInstall: no hooks here

    return perform


def new_committer() -> tuple[Committer, list[SidecarState]]:
    saved: list[SidecarState] = []

    def save(state: SidecarState) -> bool:
        saved.append(state)
        return True

    return Committer(SidecarState(), save=save, reload=lambda: None), saved


def run(case: Case, answers: list[SummaryResult | Exception] | None = None
        ) -> tuple[maintenance.Outcome, list[SummaryRequest]]:
    asked: list[SummaryRequest] = []
    queue = list(answers or [])

    def summarize(request: SummaryRequest) -> SummaryResult:
        asked.append(request)
        answer = queue.pop(0) if queue else SummaryResult(text="## Goal\n- g")
        if isinstance(answer, Exception):
            raise answer
        return answer

    ctx = case.ctx
    view = visible_view(ctx.state.projection, ctx.canonical)
    tokens = ctx.estimator.estimate(RequestShape(view))
    outcome = driving.drive(maintenance.maintain(ctx, view, tokens),
                            performer(case, summarize))  # type: ignore[arg-type]
    return outcome, asked


def test_below_the_trigger_nothing_is_written_and_latches_clear() -> None:
    c, saved = new_committer()
    latches = Latches(stuck_hash="x", failed_turn=1, summary_turn=1)
    outcome, asked = run(context(session(3, 100), c, latches=latches))
    assert outcome.action is Action.NONE and not asked and not saved
    assert outcome.latches == Latches(summary_turn=1)  # the summary turn survives


def test_prune_first_and_stop_when_it_clears_the_pressure() -> None:
    c, saved = new_committer()
    outcome, asked = run(context(session(10, 800), c, pruner=HalveTools()))  # 8012 → 4012
    assert outcome.action is Action.PRUNE and outcome.pruned and not asked
    assert outcome.tokens < 5000 and len(saved) == 1


def test_a_fold_installs_one_checkpoint_below_the_trigger() -> None:
    c, _saved = new_committer()
    outcome, asked = run(context(session(10, 800), c))
    assert outcome.action is Action.SUMMARY and len(asked) == 1
    assert outcome.tokens < 5000 and outcome.summary_calls == 1
    assert outcome.latches.summary_turn == 1


def test_at_most_two_summaries_under_pressure_then_the_stuck_latch() -> None:
    c, _saved = new_committer()
    # 8915 tokens; the summary request limit (7244) cuts the first fold at the largest safe
    # end, so a second fold follows. Each summary is large enough that the checkpoint stays
    # above the trigger (5000) while still being smaller than what it replaces.
    answers = [SummaryResult(text="x" * 2000), SummaryResult(text="y" * 4300),
               SummaryResult(text="z" * 10)]
    outcome, asked = run(context(session(11, 800), c), answers)
    assert len(asked) == 2 and outcome.action is Action.SUMMARY
    last = c.state.last_receipt
    assert last is not None and last.status is Action.BLOCKED
    assert "remains above fold trigger after 2 attempts" in last.reason
    assert outcome.latches.stuck_hash


def test_one_turn_never_pays_two_automatic_summaries() -> None:
    c, _saved = new_committer()
    outcome, asked = run(context(session(10, 800), c, latches=Latches(summary_turn=1)))
    assert not asked and outcome.action is Action.NONE


def test_a_failed_view_is_not_retried_in_the_same_generation() -> None:
    c, _saved = new_committer()
    first, asked = run(context(session(10, 800), c), [ProviderError("down")])
    assert first.action is Action.FAILED and len(asked) == 1
    again, asked = run(context(session(10, 800), c, turn=2, latches=first.latches))
    assert not asked and again.action is Action.NONE


def test_a_truncated_summary_is_blocked_and_installs_nothing() -> None:
    c, saved = new_committer()
    outcome, _ = run(context(session(10, 800), c),
                     [SummaryResult(text="partial", finish_reason="length")])
    assert outcome.action is Action.BLOCKED and c.state.projection is None
    assert saved and all(s.projection is None for s in saved)


def test_above_the_hard_ceiling_with_nothing_to_fold_is_an_error() -> None:
    c, _saved = new_committer()
    canonical = [Message(role="system", content="s"), Message(role="user", content="t" * 9900)]
    outcome, _ = run(context(canonical, c))
    assert isinstance(outcome.error, CompactionRequiredError)


def test_a_manual_compaction_reports_its_summary_failure_to_the_caller() -> None:
    c, _saved = new_committer()
    outcome, _ = run(context(session(10, 800), c, trigger="manual"),
                     [SummaryFailedError("empty")])
    assert isinstance(outcome.error, SummaryFailedError)
    assert outcome.latches.failed_turn == 1


def test_a_lost_compare_and_swap_asks_for_the_stored_transcript() -> None:
    appended = Message(role="user", content="from another process")
    c, _ = new_committer()
    canonical = session(10, 800)
    ctx = context(canonical, c).ctx
    view = visible_view(None, canonical)
    steps = maintenance.maintain(ctx, view, ctx.estimator.estimate(RequestShape(view)))
    request = next(steps)
    assert isinstance(request, Summarize)
    commit = steps.send(SummaryResult(text="## Goal\n- g"))
    assert isinstance(commit, Commit) and commit.captured is not None
    c.commit(attrs.evolve(commit, change=lambda s: s))  # another install of this process
    assert isinstance(steps.throw(StaleContextError("moved")), Reread)
    receipt = steps.send(Stored([*canonical, appended], c.state))
    assert isinstance(receipt, Commit) and receipt.captured is None  # the blocked receipt
    with pytest.raises(StopIteration) as stop:
        steps.send(c.commit(receipt))
    outcome = stop.value.value
    assert outcome.view[-1] == appended and outcome.action is Action.BLOCKED


def test_a_transcript_that_grew_during_the_summary_makes_the_install_lose() -> None:
    """The run's own check: the transcript it folds grew while the summary was asked for
    (an append between the summary's ``await`` and the install), so nothing is written
    over it; the stored session is re-read and the view keeps the new message."""
    c, saved = new_committer()
    canonical = session(10, 800)
    case = context(canonical, c)
    appended = Message(role="user", content="meanwhile")

    def summarize(_request: SummaryRequest) -> SummaryResult:
        canonical.append(appended)  # the same list the run reads
        return SummaryResult(text="## Goal\n- g")

    view = visible_view(None, canonical)
    outcome = driving.drive(maintenance.maintain(case.ctx, view, len("".join(
        m.content for m in view))), performer(case, summarize))  # type: ignore[arg-type]
    assert outcome.action is Action.BLOCKED and outcome.view[-1] == appended
    assert c.state.projection is None and all(s.projection is None for s in saved)


def test_the_async_driver_reaches_the_same_outcome() -> None:
    sync_c, _ = new_committer()
    sync_outcome, _ = run(context(session(10, 800), sync_c))
    async_c, _ = new_committer()
    case = context(session(10, 800), async_c)
    ctx = case.ctx
    perform = performer(case, lambda _request: SummaryResult(text="## Goal\n- g"))

    async def aperform(step: Step) -> object:
        await asyncio.sleep(0)  # suspends: the loop really runs
        return perform(step)  # type: ignore[operator]

    view = visible_view(None, ctx.canonical)
    outcome = asyncio.run(driving.adrive(
        maintenance.maintain(ctx, view, ctx.estimator.estimate(RequestShape(view))),
        aperform))
    assert (outcome.view, outcome.tokens, outcome.action) == (
        sync_outcome.view, sync_outcome.tokens, sync_outcome.action)


# -- prune alone only when it buys a stretch of turns (the prune-alone target) ---------------


def test_a_prune_that_lands_below_the_prune_alone_target_is_installed_alone() -> None:
    c, saved = new_committer()
    # trigger 8000, prune-alone target 5000 (50% of the window): 9725 → 4925
    outcome, asked = run(context(session(12, 800), c, ratio=0.8, pruner=HalveTools()))
    assert outcome.action is Action.PRUNE and not asked and len(saved) == 1


def test_a_prune_that_only_clears_the_trigger_goes_inside_the_checkpoint() -> None:
    c, saved = new_committer()
    # 13325 → 6725 after pruning: under the trigger (8000) but above the target (5000), so
    # the old rule's prune-alone install (which breaks the cache for a few turns) is not made
    outcome, asked = run(context(session(12, 1100), c, ratio=0.8, pruner=HalveTools()))
    assert outcome.action is Action.SUMMARY and len(asked) == 1
    installs = [s for s in saved if s.last_receipt and s.last_receipt.status.value == "applied"]
    assert len(installs) == 1 and outcome.pruned  # one install: the prune is inside it
    body = c.state.projection.messages  # type: ignore[union-attr]
    kept_tools = [m for m in body if m.role == "tool"]
    assert kept_tools and all(len(m.content) == 550 for m in kept_tools)  # pruned form
    # The summary request still replays the region as it was sent (cache-aligned).
    assert all(len(m.content) == 1100 for m in asked[0].messages if m.role == "tool")


def test_when_no_checkpoint_can_be_made_the_prune_is_installed_after_all() -> None:
    c, _saved = new_committer()
    outcome, asked = run(context(session(12, 1100), c, ratio=0.8, pruner=HalveTools()),
                         [SummaryResult(text="")])  # the summary fails
    assert len(asked) == 1 and outcome.pruned and outcome.action is Action.PRUNE
    assert outcome.tokens < 8000
    receipt = c.state.last_receipt
    assert receipt is not None and receipt.action.value == "prune"


def test_every_trigger_has_a_summary_budget() -> None:
    """A trigger without one would be a KeyError in the middle of a prepare()."""
    from typing import get_args

    assert set(maintenance.MAX_SUMMARIES) == set(get_args(Trigger))
