"""``prepare()``'s decisions: prune first, then at most N summary folds, each CAS-committed.

Design §2.4, §2.5. Below the trigger nothing is written: no projection, no sidecar write, no summary
call, no event. Above it, oversized tool results are pruned first; if that does not clear the
pressure, the fold region is summarized into one checkpoint. Every outcome leaves a receipt.

:func:`maintain` is a generator over a frozen :class:`MaintenanceContext`: it yields a
:class:`~ctxfold.kernel.types.SummaryRequest` whenever it needs a summary (and is sent the
:class:`~ctxfold.kernel.types.SummaryResult`, or has the summarizer's error thrown in) and a
:data:`RESYNC` when a lost compare-and-swap means the transcript must be re-read (and is sent
the current canonical messages). It returns an :class:`Outcome`; ``ctxfold.engine.driving``
runs it against a sync or an async summarizer, so both faces share one logic.
"""

from __future__ import annotations

import math

import attrs

from ctxfold.kernel.errors import CompactionRequiredError, CtxfoldError
from ctxfold.kernel.operations import ABOVE_TRIGGER, Run
from ctxfold.kernel.outcome import FoldResult, Maintenance, MaintenanceContext
from ctxfold.kernel.state import ReceiptAction, ReceiptStatus
from ctxfold.kernel.types import Message, Trigger

#: Summary attempts per prepare: 2 under pressure, 1 on overflow, 1 manual; above the hard
#: ceiling as many as the request needs (:func:`rescue_summaries`).
MAX_SUMMARIES: dict[Trigger, int] = {"pressure": 2, "overflow": 1, "manual": 1}
#: The most folds one rescue makes: a transcript many windows long (a fork, a rewind into a
#: folded span, an imported session) is folded chunk by chunk, each summary merging the one
#: before, until the request fits; what one prepare installed the next goes on from.
MAX_RESCUE_SUMMARIES = 32
#: A pressure prune is installed alone only when it lands below this share of the window
#: (docs/performance.md, "Maintenance economics"); otherwise it goes into the checkpoint.
PRUNE_ALONE_RATIO = 0.5


def rescue_summaries(tokens: int, window: int) -> int:
    """Folds allowed when a request of ``tokens`` is above the hard ceiling: about two per
    window of excess (one summary request holds well under a window of region), bounded."""
    return min(MAX_RESCUE_SUMMARIES, 2 + math.ceil(2 * tokens / max(1, window)))


def prune_alone_target(ctx: MaintenanceContext) -> int:
    """Below what a prune is installed alone. Under pressure: :data:`PRUNE_ALONE_RATIO` of
    the window — a prune that lands just under the trigger buys a few turns and breaks the
    cache for them, so it is applied inside the checkpoint the fold builds instead. Overflow
    and manual rescues: the hard ceiling, as before."""
    if ctx.trigger == "pressure":
        return min(ctx.trigger_tokens, int(ctx.window * PRUNE_ALONE_RATIO))
    return ctx.hard_ceiling


def _skip(ctx: MaintenanceContext, run: Run) -> bool:
    """Pressure above the trigger but below the hard ceiling is not retried for a view that
    already failed or stuck in this generation, nor twice in one turn after a failure."""
    if run.tokens >= ctx.hard_ceiling:
        return False
    view_hash = run.input_hash()
    last = ctx.committer.state.last_receipt
    return (
        (
            last is not None
            and last.status in (ReceiptStatus.BLOCKED, ReceiptStatus.FAILED)
            and last.input_hash == view_hash
            and last.generation == ctx.committer.state.generation
        )
        or run.latches.stuck_hash == view_hash
        or run.latches.failed_turn == ctx.turn
    )


def maintain(ctx: MaintenanceContext, view: list[Message], tokens: int) -> Maintenance:
    """The body of ``prepare()`` (design §2.5) over ``view`` and its estimate ``tokens``."""
    run = Run(ctx, view, tokens)
    trigger, trigger_tokens, hard = ctx.trigger, ctx.trigger_tokens, ctx.hard_ceiling
    if trigger == "pressure":
        if run.tokens < trigger_tokens:
            run.latches = run.latches.cleared()
            return run.outcome()
        if _skip(ctx, run):
            return run.outcome()
    must_free = trigger == "overflow" or run.tokens >= hard
    pruned = run.prune_candidate() if trigger != "manual" or run.tokens >= hard else None
    if pruned is not None and pruned.tokens < prune_alone_target(ctx):
        if (yield from run.prune(pruned)):
            return run.outcome()
        pruned = None  # lost the compare-and-swap: fold what is stored now
    attempts = MAX_SUMMARIES[trigger]
    if run.tokens >= hard and trigger != "overflow":
        attempts = max(attempts, rescue_summaries(run.tokens, ctx.window))
    result: FoldResult | None = None
    for _ in range(attempts):
        if run.summary_calls >= attempts:
            break  # a checked summary's second pass counts as one of the attempts
        if (trigger == "pressure" and run.summary_calls == 0
                and run.latches.summary_turn == ctx.turn and run.tokens < hard):
            break  # one turn never pays two automatic summaries (a rescue above hard may)
        try:
            result = yield from run.fold(forced=trigger == "manual" or must_free, pruned=pruned)
        except CtxfoldError as exc:  # a manual compaction's summary failed, or the summary
            return run.outcome(error=exc)  # cap was reached: tell the caller
        if result is FoldResult.STALE and run.tokens >= hard:  # lost to another process
            must_free, pruned = True, run.prune_candidate()  # and still over: fold again
            continue
        if result is not FoldResult.INSTALLED:
            break
        pruned = None  # applied inside the checkpoint
        if run.tokens < trigger_tokens or (trigger != "pressure" and run.tokens < hard):
            run.latches = run.latches.cleared()
            return run.outcome()
        must_free = trigger == "overflow" or run.tokens >= hard
    # No checkpoint could be made: the prune alone still helps.
    if (pruned is not None and result is not FoldResult.STALE and (yield from run.prune(pruned))
            and (run.tokens < trigger_tokens or (trigger != "pressure" and run.tokens < hard))):
        return run.outcome()
    if result is FoldResult.INSTALLED and run.tokens >= trigger_tokens:
        run.receipt(ReceiptStatus.BLOCKED, ABOVE_TRIGGER.format(n=run.summary_calls),
                    ReceiptAction.SUMMARY)
        run.latches = attrs.evolve(run.latches, stuck_hash=run.input_hash())
    if run.tokens >= hard:
        last = ctx.committer.state.last_receipt
        return run.outcome(error=CompactionRequiredError(
            f"session {ctx.session_id!r}: request of {run.tokens} tokens is at or above the "
            f"hard ceiling {hard} (window {ctx.window}) and no checkpoint could be installed; "
            f"last receipt: {last.reason if last else 'none'}"
        ))
    return run.outcome()
