"""The thrash guard (``ctxfold.kernel.maintenance``, section 7): what it detects from
recorded telemetry, the smaller tail of the checkpoint it widens, and the cap on summaries an
hour — on ``maintain`` over a hand-built context, and on sessions built to thrash and not to."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from tests.conftest import make_config
from tests.kernel.test_maintenance import Case, context, run, session

import ctxfold
from ctxfold import Action, Config, Message, SidecarState, ToolCall
from ctxfold.engine.committer import Committer
from ctxfold.kernel import maintenance
from ctxfold.kernel.config import CheckpointConfig
from ctxfold.kernel.state import TelemetryRecord
from ctxfold.kernel.summary import wrap_summary
from ctxfold.kernel.types import utc_time
from ctxfold.testing import RecordingSummarizer

T0 = 1_800_000_000.0  # the sessions' clock starts here (2027-01-15)


def install(turn: int | None, at: float = T0, *, version: int = 1) -> TelemetryRecord:
    return TelemetryRecord(kind="install", trigger="pressure", action="summary",
                           summary_calls=1, projection_version=version,
                           created_at=utc_time(at), turn=turn)


# -- detection ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("last", "now", "refill"), [
    (5, 5, True), (5, 6, True), (5, 5 + maintenance.REFILL_TURNS, True),
    (5, 6 + maintenance.REFILL_TURNS, False),  # the checkpoint lasted: no thrash
    (9, 5, False),  # a rewind went back past it
    (None, 5, False),  # an install recorded before records had a turn
])
def test_a_checkpoint_that_refills_within_a_few_turns_is_detected(
        last: int | None, now: int, refill: bool) -> None:
    records = (install(1), install(last, version=4),
               TelemetryRecord(kind="install", action="prune", turn=now))  # a prune is no fold
    seen = maintenance.refilled(records, now)
    assert (seen is not None) is refill
    if seen is not None:
        assert seen.action == "refill"
        assert f"turn {last} (projection v4)" in seen.detail and f"turn {now}" in seen.detail


def test_a_fold_after_a_manual_checkpoint_is_not_judged_a_refill() -> None:
    manual = attrs.evolve(install(5, version=2), trigger="manual")  # a task-boundary fold
    assert maintenance.refilled((install(1), manual), 6) is None
    assert maintenance.refilled((install(1), install(5, version=2)), 6) is not None


def test_no_recorded_checkpoint_is_no_refill() -> None:
    assert maintenance.refilled((), 3) is None
    assert maintenance.refilled((TelemetryRecord(kind="resume", turn=3),), 3) is None


def test_a_region_that_is_mostly_the_previous_summary_folds_the_same_span() -> None:
    def count(m: Message) -> int:
        return len(m.content)

    summary = wrap_summary("## Goal\n- " + "g" * 600)
    mostly = [summary, Message(role="user", content="u" * 200)]
    assert (seen := maintenance.same_span(mostly, count)) is not None
    assert seen.action == "same-span" and "of the fold region is the previous summary" in \
        seen.detail
    assert maintenance.same_span([summary, Message(role="user", content="u" * 2000)], count) is None
    assert maintenance.same_span([], count) is None


def test_the_cap_counts_the_summary_installs_of_the_last_hour_only() -> None:
    records = (install(1, T0 - 3700),  # over an hour ago
               install(2, T0 - 1800), install(3, T0 - 60),
               TelemetryRecord(kind="install", action="prune", created_at=utc_time(T0 - 30)),
               TelemetryRecord(kind="thrash", action="refill", created_at=utc_time(T0 - 20)),
               attrs.evolve(install(4), created_at=""))  # no readable time: not counted
    assert maintenance.summary_times(records, T0 - maintenance.CAP_SECONDS) == [T0 - 1800, T0 - 60]
    assert maintenance.over_cap(records, now=T0, limit=3, session_id="s") is None
    assert maintenance.over_cap(records, now=T0, limit=0, session_id="s") is None  # 0: no cap
    error = maintenance.over_cap(records, now=T0, limit=2, session_id="s-7")
    assert isinstance(error, ctxfold.SummaryCapError)
    assert isinstance(error, ctxfold.MaintenanceError)
    assert (error.session_id, error.count, error.limit) == ("s-7", 2, 2)
    assert error.retry_after == pytest.approx(1800)  # when the older one is an hour old
    message = str(error)
    for needle in ("session 's-7'", "2 summaries", "[checkpoint] max_summaries_per_hour = 2",
                   "0 = no cap", "30 min"):
        assert needle in message


# -- acting, on maintain ----------------------------------------------------------------------


def committer(*telemetry: TelemetryRecord, clock: Callable[[], float] = lambda: T0
              ) -> tuple[Committer, list[SidecarState]]:
    saved: list[SidecarState] = []

    def save(state: SidecarState) -> bool:
        saved.append(state)
        return True

    return Committer(SidecarState(telemetry=telemetry), save=save, reload=lambda: None,
                     clock=clock), saved


def test_a_refilled_checkpoint_is_recorded_and_the_next_one_keeps_a_smaller_tail() -> None:
    """The same view folded twice: after a checkpoint one turn ago (thrash) and after one
    long ago. The thrash fold takes all but the newest round: its checkpoint is smaller and
    covers more, and a thrash record says why."""
    canonical = session(50, 100)  # 5,512 chars, trigger 5,000: a 5 % tail holds 4 rounds
    calm, _ = committer(install(1))
    calm_outcome, calm_asked = run(context(canonical, calm, turn=9))
    hot, _ = committer(install(8))
    hot_outcome, hot_asked = run(context(canonical, hot, turn=9))
    assert calm_outcome.action is hot_outcome.action is Action.SUMMARY
    assert len(calm_asked) == len(hot_asked) == 1
    assert hot_outcome.tokens < calm_outcome.tokens
    assert hot.state.projection is not None and calm.state.projection is not None
    assert hot.state.projection.covered_count > calm.state.projection.covered_count
    # The 1 % tail keeps the newest round only; the 5 % one about four.
    assert len(canonical) - hot.state.projection.covered_count == 2
    assert len(canonical) - calm.state.projection.covered_count > 4
    assert not [r for r in calm.state.telemetry if r.kind == "thrash"]
    (record,) = [r for r in hot.state.telemetry if r.kind == "thrash"]
    assert (record.action, record.trigger, record.turn) == ("refill", "pressure", 9)
    assert "turn 8" in record.detail and f"{maintenance.THRASH_TAIL_RATIO:.0%}" in record.detail
    # Recorded before the summary was asked for, and the install carries its turn.
    kinds = [(r.kind, r.action) for r in hot.state.telemetry]
    assert kinds == [("install", "summary"), ("thrash", "refill"), ("install", "summary")]
    assert hot.state.telemetry[-1].turn == 9


def test_a_fold_of_mostly_the_previous_summary_widens_too() -> None:
    summary = wrap_summary("## Goal\n- " + "g" * 3_000)
    canonical = [Message(role="system", content="s"), Message(role="user", content="task"),
                 summary, *session(9, 200)[2:]]
    c, _ = committer()  # no install recorded: only the region tells
    outcome, asked = run(context(canonical, c, ratio=0.4))
    assert outcome.action is Action.SUMMARY and len(asked) == 1
    (record,) = [r for r in c.state.telemetry if r.kind == "thrash"]
    assert record.action == "same-span"
    assert c.state.projection is not None
    assert len(canonical) - c.state.projection.covered_count == 2  # the newest round only


def test_a_manual_compaction_is_never_thrash() -> None:
    c, _ = committer(install(8))
    outcome, asked = run(context(session(50, 100), c, trigger="manual", turn=9))
    assert outcome.action is Action.SUMMARY and len(asked) == 1
    assert not [r for r in c.state.telemetry if r.kind == "thrash"]


def test_over_the_cap_nothing_is_asked_and_nothing_installed() -> None:
    c, saved = committer(install(1, T0 - 120), install(2, T0 - 60))

    def capped() -> Case:  # each prepare starts from the session's state as it is then
        case = context(session(50, 100), c, turn=9)
        return attrs.evolve(case, ctx=attrs.evolve(case.ctx, max_summaries_per_hour=2))

    outcome, asked = run(capped())
    assert isinstance(outcome.error, ctxfold.SummaryCapError) and not asked
    assert outcome.summary_calls == 0 and c.state.projection is None
    assert c.state.last_receipt is None and c.state.generation == 0
    assert [(r.kind, r.action) for r in c.state.telemetry][-1] == ("thrash", "cap")
    again, asked = run(capped())  # the cap holds for every prepare, recorded once
    assert isinstance(again.error, ctxfold.SummaryCapError) and not asked
    assert sum(r.action == "cap" for r in c.state.telemetry) == 1 and len(saved) == 1


# -- sessions built to thrash, and not to ------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def thrashing_turn(cm: Any, k: int) -> None:
    """One turn of three tool results just under the pruner's 8,192 characters: ~6,000
    tokens, three quarters of the trigger — each checkpoint is full again a turn later."""
    calls = tuple(ToolCall(id=f"c{k}-{j}", name="grep", arguments="{}") for j in range(3))
    cm.append(Message(role="assistant", content=f"Searching, step {k}.", tool_calls=calls))
    cm.append(*[Message(role="tool", content=(f"src/app.py:{k}{j}: match " * 400)[:8_000],
                        tool_call_id=call.id) for j, call in enumerate(calls)])


def thrash_config(tmp_path: Path, cap: int) -> Config:
    return attrs.evolve(make_config(tmp_path, window=16_000, ratio=0.5),
                        checkpoint=CheckpointConfig(max_summaries_per_hour=cap))


def seeded(open_session: Callable[..., Any], config: Config, summarizer: RecordingSummarizer,
           clock: Clock) -> Any:
    cm = open_session("thrash", config=config, summarizer=summarizer, clock=clock)
    cm.append(Message(role="system", content="You are a coding agent."),
              Message(role="user", content="Find where src/app.py mishandles empty input."))
    return cm


def test_a_session_built_to_thrash_is_recorded_and_stopped_at_the_cap(
        open_session: Callable[..., Any], tmp_path: Path) -> None:
    summarizer, clock = RecordingSummarizer(), Clock()
    cm = seeded(open_session, thrash_config(tmp_path, cap=3), summarizer, clock)
    for k in range(4):  # turn 1 fits; turns 2, 3 and 4 each fold
        thrashing_turn(cm, k)
        clock.now += 60
        cm.prepare()
    assert len(summarizer.requests) == 3
    thrashes = [r for r in cm.state.telemetry if r.kind == "thrash"]
    assert [(r.action, r.turn) for r in thrashes] == [("refill", 3), ("refill", 4)]
    assert "turn 2" in thrashes[0].detail and "turn 3" in thrashes[1].detail
    thrashing_turn(cm, 4)
    before = (len(cm.canonical), cm.state.projection)
    with pytest.raises(ctxfold.SummaryCapError) as info:
        cm.prepare()
    assert len(summarizer.requests) == 3  # stopped before the summarizer was asked
    assert (info.value.session_id, info.value.count, info.value.limit) == ("thrash", 3, 3)
    assert "[checkpoint] max_summaries_per_hour = 3" in str(info.value)
    assert (len(cm.canonical), cm.state.projection) == before  # nothing changed
    with pytest.raises(ctxfold.SummaryCapError):
        cm.prepare()  # and every prepare after it, until the hour has passed
    assert len(summarizer.requests) == 3


def test_the_cap_counts_recorded_installs_across_a_reopen(
        open_session: Callable[..., Any], tmp_path: Path) -> None:
    summarizer, clock = RecordingSummarizer(), Clock()
    config = thrash_config(tmp_path, cap=2)
    cm = seeded(open_session, config, summarizer, clock)
    for k in range(3):
        thrashing_turn(cm, k)
        cm.prepare()
    thrashing_turn(cm, 3)
    assert len(summarizer.requests) == 2
    stamps = [r.created_at for r in cm.state.telemetry if maintenance.is_summary_install(r)]
    assert stamps == [utc_time(T0)] * 2  # stamped by the session's clock
    del cm
    clock.now += 3_500  # a restart within the hour: the sidecar remembers
    again = open_session("thrash", config=config, summarizer=summarizer, clock=clock)
    with pytest.raises(ctxfold.SummaryCapError) as info:
        again.prepare()
    assert info.value.retry_after == pytest.approx(100)
    clock.now += 101  # an hour after the installs: allowed again
    assert again.prepare().action == "summary" and len(summarizer.requests) == 3


def test_a_long_session_that_does_not_thrash_records_no_thrash_and_hits_no_cap(
        open_session: Callable[..., Any], tmp_path: Path) -> None:
    """Ordinary turns in a small window: many checkpoints within minutes, each lasting
    longer than a few turns — the guard stays quiet under the default cap."""
    summarizer, clock = RecordingSummarizer(), Clock()
    config = make_config(tmp_path, window=16_000, ratio=0.5)
    assert config.checkpoint.max_summaries_per_hour == 60
    cm = seeded(open_session, config, summarizer, clock)
    for k in range(120):
        call = ToolCall(id=f"c{k}", name="read", arguments="{}")
        cm.append(Message(role="assistant", content=f"Reading part {k}.", tool_calls=(call,)),
                  Message(role="tool", content=(f"def f{k}(x): return x  # {k}\n" * 70),
                          tool_call_id=call.id))
        clock.now += 20
        cm.prepare()
    assert len(summarizer.requests) >= 4
    assert not [r for r in cm.state.telemetry if r.kind == "thrash"]


def test_a_thrash_note_that_loses_to_another_process_leaves_its_checkpoint_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Process A refills within a few turns; process B installs a checkpoint just as A's guard
    # notes the thrash. A's note adopts B's sidecar, so A's install must be stale, never a
    # checkpoint built from A's older view over B's.
    from tests.engine.test_manager import rounds, seed

    config = make_config(tmp_path, window=30_000, ratio=0.5)
    a = ctxfold.open_session("s", config=config, summarizer=RecordingSummarizer())
    seed(a)
    rounds(a, 40, 1_500)
    assert a.prepare().action is Action.SUMMARY
    for i in range(3):
        a.append(Message(role="user", content=" ".join(f"w{i}x{j}" for j in range(3000))),
                 Message(role="assistant", content="ok"))
    b = ctxfold.open_session("s", config=config, summarizer=RecordingSummarizer())
    refilled = maintenance.refilled
    raced: list[int] = []

    def racing(telemetry: Any, turn: int) -> Any:
        seen = refilled(telemetry, turn)
        if seen is not None and not raced:
            b.compact("B's checkpoint")
            raced.append(b.state.projection.projection_version)
        return seen

    monkeypatch.setattr(maintenance, "refilled", racing)
    assert a.prepare().action is not Action.SUMMARY
    stored = ctxfold.open_session("s", config=config, summarizer=RecordingSummarizer())
    assert raced and stored.state.projection.projection_version == raced[0]  # B's stands
