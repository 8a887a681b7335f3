"""The thrash guard: checkpoints that refill within a few turns or fold the same span again,
and the cap on summaries an hour (docs/checkpoints.md, "When checkpoints thrash").

Runaway loops of 18–108 compactions a night are reported of agents that have no such guard:
each checkpoint leaves a view the next turn or two fill up again, and every fold pays for a
summary. Detection reads only what the session recorded — its sidecar telemetry — so it
survives a restart and sees the folds of other processes sharing the session. What is done
about it is :meth:`ctxfold.kernel.maintenance.Run.fold`'s: a ``thrash`` telemetry record, a
checkpoint that keeps a smaller verbatim tail
(:data:`ctxfold.kernel.maintenance.THRASH_TAIL_RATIO`), and
:class:`~ctxfold.kernel.errors.SummaryCapError` before a summary over the cap is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from ctxfold.kernel.errors import SummaryCapError
from ctxfold.kernel.state import TelemetryRecord
from ctxfold.kernel.summary import is_summary_message
from ctxfold.kernel.types import Message, parse_time

#: A checkpoint that brings the view back to the trigger within this many model turns bought
#: almost nothing. An ordinary checkpoint (head + summary + the 5 % tail) leaves the view far
#: below ``compact_ratio`` and takes many turns to refill; the reported runaway loops fold
#: every turn or two. Three is "a few turns" and no more: a turn that adds a third of the
#: window's pressure is already the pattern the guard is for.
REFILL_TURNS = 3
#: A fold region of which at least this share (in tokens) is the previous summary folds the
#: same span again: what it would summarize is mostly a summary.
SAME_SPAN_SHARE = 0.5
#: The span ``[checkpoint] max_summaries_per_hour`` counts summaries over, in seconds.
CAP_SECONDS = 3600.0


@attrs.frozen
class Thrash:
    """What the guard saw: ``action`` is the ``thrash`` record's (``refill``, ``same-span``),
    ``detail`` says what happened."""

    action: str
    detail: str


def is_summary_install(record: TelemetryRecord) -> bool:
    return record.kind == "install" and record.action == "summary"


def refilled(telemetry: Sequence[TelemetryRecord], turn: int) -> Thrash | None:
    """The fold about to be made at ``turn`` comes within :data:`REFILL_TURNS` turns of the
    previous summary install (``None`` when it does not, or no install recorded its turn).
    A manual previous install (``compact()``, a model's ``session:fold`` at a task boundary)
    is not judged: folding early was asked for, and the fold that follows is the trigger's."""
    last = next((r for r in reversed(telemetry) if is_summary_install(r)), None)
    if (last is None or last.turn is None or last.trigger == "manual"
            or not 0 <= turn - last.turn <= REFILL_TURNS):
        return None
    return Thrash("refill", f"the checkpoint of turn {last.turn} (projection "
                            f"v{last.projection_version}) reached the trigger again at turn {turn}")


def same_span(region: Sequence[Message], count: Callable[[Message], int]) -> Thrash | None:
    """The fold ``region`` is mostly the previous summary (``None`` when it is not)."""
    total = sum(count(m) for m in region)
    summary = sum(count(m) for m in region if is_summary_message(m))
    if not total or summary < SAME_SPAN_SHARE * total:
        return None
    return Thrash("same-span", f"{summary / total:.0%} of the fold region is the previous "
                               f"summary: it would fold the same span again")


def summary_times(telemetry: Sequence[TelemetryRecord], since: float) -> list[float]:
    """When the summary installs recorded at or after ``since`` were made (seconds since the
    epoch, by the session's clock); a record without a readable time is not counted."""
    times = []
    for record in telemetry:
        at = parse_time(record.created_at) if is_summary_install(record) else None
        if at is not None and at.timestamp() >= since:
            times.append(at.timestamp())
    return times


def over_cap(telemetry: Sequence[TelemetryRecord], *, now: float, limit: int,
             session_id: str) -> SummaryCapError | None:
    """The error to raise when one more summary would pass ``limit`` summaries in the hour
    before ``now`` (``None`` when it would not, or ``limit`` is 0: no cap)."""
    if limit <= 0:
        return None
    times = summary_times(telemetry, now - CAP_SECONDS)
    if len(times) < limit:
        return None
    retry_after = max(0.0, min(times) + CAP_SECONDS - now)
    return SummaryCapError(
        f"session {session_id!r}: {len(times)} summaries were installed in the last hour and "
        f"[checkpoint] max_summaries_per_hour = {limit}: no summary was asked for and nothing "
        f"changed. Its checkpoints thrash (`ctxfold inspect {session_id}` shows the thrash "
        f"records): make each turn add less (smaller tool results), or raise "
        f"max_summaries_per_hour (0 = no cap); the next summary is allowed in "
        f"{retry_after / 60:.0f} min",
        session_id=session_id, count=len(times), limit=limit, retry_after=retry_after,
    )
