"""The fold path: what ``prepare()`` does, in the order it does it (design §2.4, §2.5, §4, §5).

Below the trigger nothing is written: no projection, no sidecar write, no summary call, no
event. Above it, this module reads top to bottom as the path runs:

1. **the run's values** — the frozen :class:`MaintenanceContext` it starts from, the typed
   steps it yields for every effect, and the :class:`Outcome` it ends with;
2. **decide** — :func:`maintain`: prune first, alone only when that buys a stretch of turns,
   then at most N folds, each checked and installed by compare-and-swap;
3. **prune** — :meth:`Run.prune_candidate`, :meth:`Run.prune`;
4. **fold** — :meth:`Run.fold`: plan the region (:func:`plan_fold`), guard against thrash
   (:func:`refilled`, :func:`same_span`, :func:`over_cap`),
   request the summary (:func:`summary_request`: the largest safe prefix, or the region
   clipped), build the candidate (:func:`candidate`), check it (:func:`check`), reject it or
   install it;
5. **install by compare-and-swap** — :meth:`Run.install` (:func:`installed`), and after a
   lost swap the re-read of the stored session;
6. **record the receipt** — :meth:`Run.receipt` (:func:`recorded`), and the ledger of what
   a fold cost the prompt cache;
7. **the pure functions it uses** — the thrash guard's detection, head, tail, region, safe
   ends, new body, clipping, the summary request, the candidate and its check.

The kernel does no I/O. Each effect is a step the generator yields and the engine's driver
(:mod:`ctxfold.engine.driving`) performs, sending back the typed reply:

=====================  =========================================================  ==========
step                   the driver                                                 reply
=====================  =========================================================  ==========
:class:`Summarize`     asks the summarizer (sync or async)                        SummaryResult
:class:`Commit`        applies ``change`` to the stored sidecar by CAS            SidecarState
:class:`Reread`        takes over the stored transcript and sidecar               :class:`Stored`
:class:`AfterInstall`  fires the ``ctxfold_after_install`` hook                   ``None``
=====================  =========================================================  ==========

An error of the effect that the step names in ``thrown`` (a summarizer's
:class:`CtxfoldError`, a lost compare-and-swap's :class:`StaleContextError`) is thrown in at
the ``yield``; any other propagates. The only calls that leave this module for behaviour are
the plugins the context carries — the estimator, the pruner and the summary check (pins and
the check of a summary) — and its clock; the rest are value helpers named for their concept
(the summary message format, the view rule, fingerprints).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator, Sequence
from typing import ClassVar, Literal, TypeVar

import attrs

from ctxfold.kernel.contracts import Estimator, Pruner, SummaryCheck
from ctxfold.kernel.errors import (
    CompactionRequiredError,
    CtxfoldError,
    StaleContextError,
    SummaryCapError,
    SummaryFailedError,
)
from ctxfold.kernel.fingerprint import content_hash, covered_prefix_hash, fingerprint
from ctxfold.kernel.ledger import LedgerEntry
from ctxfold.kernel.state import (
    Action,
    Projection,
    Receipt,
    SidecarState,
    TelemetryRecord,
)
from ctxfold.kernel.summary import (
    briefing_tokens,
    build_summary_request,
    is_summary_message,
    lookup_hint,
    revise_request,
    summary_output_cap,
    validate_summary_result,
    wrap_summary,
)
from ctxfold.kernel.types import (
    CheckResult,
    Message,
    PinBlock,
    RequestShape,
    SummaryRequest,
    SummaryResult,
    ToolSchema,
    Trigger,
    parse_time,
    utc_time,
)
from ctxfold.kernel.view import canonical_index, input_hash, visible_view

# -- 1. the run's values ---------------------------------------------------------------------

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
#: The hard ceiling is the window minus this protocol reserve (design §2.4).
PROTOCOL_RESERVE = 256

ABOVE_TRIGGER = "summary result remains above fold trigger after {n} attempts"
NO_REGION = "above the maintenance threshold but no foldable region remains"
NOTHING_TO_FOLD = (
    "nothing to fold: the recent tail (5% of the window) and the pinned head already hold "
    "the whole conversation"
)
NOT_SMALLER = "checkpoint candidate is not smaller than the request it replaces"
ABOVE_CEILING = "checkpoint candidate is not below the hard ceiling"
NO_SAFE_PREFIX = "no summary request fits the window"
STALE = "context changed during summary; automatic retry blocked for this generation"
LACKS_PIN = "checkpoint candidate lacks the pinned rule {rule!r}"


@attrs.frozen
class Latches:
    """Runtime-only guards (never persisted): the stuck latch and the per-turn guards."""

    stuck_hash: str = ""
    failed_turn: int = -1
    summary_turn: int = -1

    def cleared(self) -> Latches:
        """After maintenance got the request under the trigger (the summary turn stays)."""
        return Latches(summary_turn=self.summary_turn)


@attrs.frozen
class MaintenanceContext:
    """Everything one ``prepare()`` works from. ``canonical`` is the session's transcript,
    read, never mutated here (an append while the run waits makes its install lose);
    ``state`` is the session's sidecar state as the run starts (each :class:`Commit` and
    :class:`Reread` reply brings the run up to date)."""

    session_id: str
    trigger: Trigger
    focus: str | None
    window: int
    trigger_tokens: int
    turn: int
    latches: Latches
    tools: tuple[ToolSchema, ...]
    canonical: Sequence[Message]
    estimator: Estimator
    pruner: Pruner
    count: Callable[[Message], int]
    state: SidecarState
    #: The last observed request's prompt plus its reply: the prefix the provider caches
    #: (``None``: no usage observed yet; a fold's ledger then estimates it).
    cached_tokens: int | None = None
    #: The session's clock (seconds since the epoch): every timestamp the run writes.
    clock: Callable[[], float] = time.time
    #: Pins and the summary check (``None``: a checkpoint is head + summary + tail only).
    check: SummaryCheck | None = None
    #: ``[checkpoint] max_summaries_per_hour`` (0: no cap; the thrash guard, section 7).
    max_summaries_per_hour: int = 0

    @property
    def hard_ceiling(self) -> int:
        """``window − 256``: the protocol reserve (design §2.4)."""
        return self.window - PROTOCOL_RESERVE


@attrs.frozen
class Capture:
    """What an install saw when its operation started: the transcript length its view was
    built from (the run checks it), the projection version and generation (the driver checks
    them, and that the transcript was not replaced by a rewind or a re-read). The commit
    loses if any of it moved."""

    canonical_len: int
    projection_version: int
    generation: int


#: The errors of a step's effect its generator is sent (thrown in at the ``yield``); any
#: other error propagates out of the driver (:mod:`ctxfold.engine.driving`).
Thrown = tuple[type[CtxfoldError], ...]


@attrs.frozen
class Summarize:
    """Step: ask the summarizer for ``request``. Reply: its :class:`SummaryResult`; the
    summarizer's :class:`CtxfoldError` is thrown in."""

    thrown: ClassVar[Thrown] = (CtxfoldError,)
    request: SummaryRequest


@attrs.frozen
class Commit:
    """Step: write ``change`` of the session's sidecar state by compare-and-swap, appending
    ``record`` (its cache figures filled in by the driver). ``captured``: an install, which
    loses (:class:`StaleContextError` thrown in) when another install or receipt of this
    process came first, or the transcript was rewound or re-read (the driver checks; the run
    itself checks that the transcript did not grow past its view); ``change`` raises it when
    another process installed first. Reply: the state now held."""

    thrown: ClassVar[Thrown] = (StaleContextError,)
    change: Callable[[SidecarState], SidecarState]
    record: TelemetryRecord | None = None
    captured: Capture | None = None


@attrs.frozen
class Reread:
    """Step: after a lost compare-and-swap, take over the stored session. Reply:
    :class:`Stored` (a failure to read it propagates)."""

    thrown: ClassVar[Thrown] = ()


@attrs.frozen
class Stored:
    """The reply to :class:`Reread`: the transcript and sidecar state the session now
    holds."""

    canonical: Sequence[Message]
    state: SidecarState


@attrs.frozen
class AfterInstall:
    """Step: fire the ``ctxfold_after_install`` hook for ``receipt``. Reply: ``None`` (a
    hook's error propagates)."""

    thrown: ClassVar[Thrown] = ()
    receipt: Receipt


Step = Summarize | Commit | Reread | AfterInstall


@attrs.frozen
class Outcome:
    """What ``prepare()`` ends with. ``error`` is raised by the engine after it applied the
    rest (latches); a transcript re-read after a lost CAS is the engine's own (it answered
    the :class:`Reread`)."""

    view: list[Message]
    tokens: int
    action: Action
    summary_calls: int
    pruned: bool
    latches: Latches
    error: CtxfoldError | None = None


@attrs.frozen
class Pruned:
    """A pruned view not yet installed: its messages, how many results it cut, its size."""

    view: list[Message]
    affected: int
    tokens: int


Maintenance = Generator[Step, object, Outcome]
T = TypeVar("T")


# -- 2. decide -------------------------------------------------------------------------------


def maintain(ctx: MaintenanceContext, view: list[Message], tokens: int) -> Maintenance:
    """The body of ``prepare()`` (design §2.5) over ``view`` and its estimate ``tokens``."""
    run = Run(ctx, view, tokens)
    trigger, trigger_tokens, hard = ctx.trigger, ctx.trigger_tokens, ctx.hard_ceiling
    if trigger == "pressure":
        if run.tokens < trigger_tokens:
            run.latches = run.latches.cleared()
            return run.outcome()
        if run.skip():
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
    result: Action | None = None
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
        if result is Action.STALE and run.tokens >= hard:  # lost to another process
            must_free, pruned = True, run.prune_candidate()  # and still over: fold again
            continue
        if result is not Action.APPLIED:
            break
        pruned = None  # applied inside the checkpoint
        if run.tokens < trigger_tokens or (trigger != "pressure" and run.tokens < hard):
            run.latches = run.latches.cleared()
            return run.outcome()
        must_free = trigger == "overflow" or run.tokens >= hard
    # No checkpoint could be made: the prune alone still helps.
    if (pruned is not None and result is not Action.STALE and (yield from run.prune(pruned))
            and (run.tokens < trigger_tokens or (trigger != "pressure" and run.tokens < hard))):
        return run.outcome()
    if result is Action.APPLIED and run.tokens >= trigger_tokens:
        yield from run.receipt(Action.BLOCKED, ABOVE_TRIGGER.format(n=run.summary_calls),
                               Action.SUMMARY)
        run.latches = attrs.evolve(run.latches, stuck_hash=run.input_hash())
    if run.tokens >= hard:
        last = run.state.last_receipt
        return run.outcome(error=CompactionRequiredError(
            f"session {ctx.session_id!r}: request of {run.tokens} tokens is at or above the "
            f"hard ceiling {hard} (window {ctx.window}) and no checkpoint could be installed; "
            f"last receipt: {last.reason if last else 'none'}"
        ))
    return run.outcome()


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


class Run:
    """The mutable state of one ``prepare()``: the view it works on, the session state it
    has seen, and what it did. Its methods are the operations :func:`maintain` decides on."""

    def __init__(self, ctx: MaintenanceContext, view: list[Message], tokens: int) -> None:
        self.ctx = ctx
        self.canonical = ctx.canonical
        self.state = ctx.state
        self.view, self.tokens = view, tokens
        #: How many transcript messages the view was built from.
        self.view_len = len(self.canonical)
        self.latches = ctx.latches
        self.summary_calls = 0
        self.action = Action.NONE
        self.pruned = False
        #: The ledger's summary figures of the fold under way (input, read, output).
        self.summary_tokens = LedgerEntry(estimated=False)
        #: What the thrash guard saw in this run (its folds then keep the smaller tail).
        self.thrash: Thrash | None = None
        self.noted = False

    def outcome(self, error: CtxfoldError | None = None) -> Outcome:
        return Outcome(
            view=self.view, tokens=self.tokens, action=self.action,
            summary_calls=self.summary_calls, pruned=self.pruned, latches=self.latches,
            error=error,
        )

    def estimate(self, messages: Sequence[Message]) -> int:
        return self.ctx.estimator.estimate(RequestShape(list(messages), self.ctx.tools))

    def refresh(self) -> None:
        self.view_len = len(self.canonical)
        self.view = visible_view(self.state.projection, self.canonical)
        self.tokens = self.estimate(self.view)

    def input_hash(self) -> str:
        return input_hash(self.state.prompt_cache_key, self.view)

    def stamp(self) -> str:
        """Now, by the session's clock, as the ISO-8601 UTC string every record carries."""
        return utc_time(self.ctx.clock())

    def skip(self) -> bool:
        """Pressure above the trigger but below the hard ceiling is not retried for a view
        that already failed or stuck in this generation, nor twice in one turn after a
        failure."""
        if self.tokens >= self.ctx.hard_ceiling:
            return False
        view_hash = self.input_hash()
        last = self.state.last_receipt
        return (
            (
                last is not None
                and last.status in (Action.BLOCKED, Action.FAILED)
                and last.input_hash == view_hash
                and last.generation == self.state.generation
            )
            or self.latches.stuck_hash == view_hash
            or self.latches.failed_turn == self.ctx.turn
        )

    # -- 3. prune ----------------------------------------------------------------------------

    def prune_candidate(self) -> Pruned | None:
        """What the pruner would make of the view, when it is smaller (nothing installed)."""
        pruned = self.ctx.pruner.prune(self.view)
        if pruned is None:
            return None
        new_view, affected = pruned
        new_tokens = self.estimate(new_view)
        return Pruned(new_view, affected, new_tokens) if new_tokens < self.tokens else None

    def prune(self, pruned: Pruned) -> Generator[Step, object, bool]:
        """Install ``pruned`` alone (a prune projection over the whole transcript)."""
        captured = self.capture()
        made = Candidate(body=pruned.view, covered_count=len(self.canonical), view=pruned.view)
        if not (yield from self.install(captured, self.input_hash(), Action.PRUNE, made,
                                        pruned.tokens, affected=pruned.affected)):
            return False
        self.action = Action.PRUNE
        self.pruned = True
        self.refresh()
        return True

    # -- 4. fold -----------------------------------------------------------------------------

    def fold(
        self, forced: bool, pruned: Pruned | None = None
    ) -> Generator[Step, object, Action]:
        """One summary fold: plan the region, request its summary, build and check the
        candidate, install it. With ``pruned``, the kept messages are taken from the pruned
        view (the prune is applied inside the checkpoint instead of being installed alone)."""
        ctx = self.ctx
        automatic = ctx.trigger != "manual"  # a compaction asked for is never thrash
        if automatic and self.summary_calls == 0:  # the run's folds after it go on from it
            self.thrash = refilled(self.state.telemetry, ctx.turn)
        plan = self.plan(forced)
        if automatic and plan is not None and self.thrash is None:
            self.thrash = same_span(self.view[plan.head:plan.end], ctx.count)
            plan = self.plan(forced) if self.thrash is not None else plan
        if plan is None:
            if ctx.trigger == "manual":  # asked for, but there is simply nothing to fold
                yield from self.receipt(Action.NOOP, NOTHING_TO_FOLD, Action.NOOP)
            else:  # blocked: not retried for this view in this generation
                yield from self.receipt(Action.BLOCKED, NO_REGION, Action.NOOP)
            return Action.NOOP
        planned = summary_request(
            self.view, plan, tools=ctx.tools, window=ctx.window, focus=ctx.focus,
            cache_key=self.state.prompt_cache_key, estimator=ctx.estimator, count=ctx.count,
        )
        if planned is None:
            yield from self.receipt(Action.BLOCKED, NO_SAFE_PREFIX, Action.SUMMARY)
            return Action.BLOCKED
        # Captured before the guard's note: a note that loses its compare-and-swap adopts
        # another process's commit, which the install's check must then see as stale.
        captured = self.capture()
        yield from self.guard()
        view_hash = self.input_hash()
        self.summary_calls += 1
        if ctx.trigger != "manual":  # one turn never pays two automatic summaries
            self.latches = attrs.evolve(self.latches, summary_turn=ctx.turn)
        try:
            answer = yield Summarize(planned.request)
            self.tally(planned.request, answer)
            if not isinstance(answer, SummaryResult):
                raise SummaryFailedError(
                    f"summarizer returned {type(answer).__name__}, not a SummaryResult")
            text = validate_summary_result(answer)
        except CtxfoldError as exc:
            status = Action.BLOCKED if isinstance(exc, SummaryFailedError) else Action.FAILED
            yield from self.receipt(status, f"summary failed: {exc}", Action.SUMMARY)
            self.latches = attrs.evolve(self.latches, failed_turn=ctx.turn)
            if ctx.trigger == "manual":
                raise
            return Action.FAILED
        made = candidate(
            self.view, planned.plan, text, projection=self.state.projection,
            canonical=self.canonical, window=ctx.window, count=ctx.count,
            pruned=pruned.view if pruned else None, pins=ctx.check.pins if ctx.check else None)
        checked = None
        if ctx.check is not None:
            checked, calls = yield from self.tallied(check(
                ctx.check, planned, made, text, self.view, self.canonical, ctx.window))
            self.summary_calls += calls
            made = made.with_summary(checked.text)  # the same body, hint and rules
        missing = [r for r in made.rules if not any(r in m.content for m in made.view)]
        if missing:
            yield from self.receipt(Action.BLOCKED, LACKS_PIN.format(rule=missing[0][:80]),
                                    Action.SUMMARY)
            return Action.BLOCKED
        new_tokens = self.estimate(made.view)
        if new_tokens >= self.tokens:
            yield from self.receipt(Action.BLOCKED, NOT_SMALLER, Action.SUMMARY)
            return Action.BLOCKED
        if (ctx.trigger != "manual" and new_tokens >= ctx.hard_ceiling
                and self.tokens < ctx.hard_ceiling):
            # (Above the ceiling already, any smaller checkpoint is progress: the rescue
            # folds again from it, and a later prepare goes on from what was installed.)
            yield from self.receipt(Action.BLOCKED, ABOVE_CEILING, Action.SUMMARY)
            return Action.BLOCKED
        if not (yield from self.install(
            captured, view_hash, Action.SUMMARY, made, new_tokens,
            summary_text=checked.text if checked else text, checked=checked,
            affected=pruned.affected if pruned else 0,
        )):
            return Action.STALE
        self.action = Action.SUMMARY
        self.pruned = self.pruned or pruned is not None
        self.refresh()
        return Action.APPLIED

    def plan(self, forced: bool) -> FoldPlan | None:
        """The fold of the view: with the smaller tail while checkpoints thrash."""
        ratio = THRASH_TAIL_RATIO if self.thrash is not None else TAIL_RATIO
        return plan_fold(self.view, self.ctx.window, self.ctx.count, forced=forced,
                         tail_ratio=ratio)

    def guard(self) -> Generator[Step, object, None]:
        """Before a summary is asked for: raise :class:`SummaryCapError` when it would pass
        the cap, and say once per run that checkpoints thrash (a ``thrash`` record each)."""
        ctx = self.ctx
        telemetry = self.state.telemetry
        error = over_cap(telemetry, now=ctx.clock(), limit=ctx.max_summaries_per_hour,
                         session_id=ctx.session_id)
        last = telemetry[-1] if telemetry else None
        if error is not None:
            if last is None or (last.kind, last.action) != ("thrash", "cap"):  # once a spell
                yield from self.note("cap", str(error))
            raise error
        if self.thrash is not None and not self.noted:
            self.noted = True
            yield from self.note(self.thrash.action, f"{self.thrash.detail}; this checkpoint "
                                 f"keeps a verbatim tail of {THRASH_TAIL_RATIO:.0%} of the "
                                 f"window, not {TAIL_RATIO:.0%}")

    def note(self, action: str, detail: str) -> Generator[Step, object, None]:
        """Record a ``thrash`` telemetry record alone: no receipt, and neither the generation
        nor the projection changes, so no operation's compare-and-swap loses."""
        projection = self.state.projection
        yield from self.commit(Commit(unchanged, record=self.record(
            kind="thrash", action=action, tokens_after=self.tokens, detail=detail,
            projection_version=projection.projection_version if projection else 0)))

    # -- 5. install by compare-and-swap ------------------------------------------------------

    def capture(self) -> Capture:
        projection = self.state.projection
        return Capture(
            canonical_len=self.view_len,
            projection_version=projection.projection_version if projection else 0,
            generation=self.state.generation,
        )

    def install(
        self, captured: Capture, view_hash: str, action: Action, made: Candidate,
        new_tokens: int, *, affected: int = 0, summary_text: str = "",
        checked: CheckResult | None = None,
    ) -> Generator[Step, object, bool]:
        """CAS-commit the projection of ``made`` (a prune's or a checkpoint's, ``new_tokens``
        its view's estimate) and fire the install hook; False (and a blocked receipt, after
        re-reading the stored session) if the context moved while the operation ran."""
        body, covered, candidate = made.body, made.covered_count, made.view
        output_hash = fingerprint(candidate)
        summary_hash = content_hash(summary_text) if summary_text else ""
        saved = self.tokens - new_tokens
        ledger = self.ledger(candidate, saved)
        self.summary_tokens = LedgerEntry(estimated=False)  # the next fold's own
        version = captured.projection_version + 1
        stamp = self.stamp()
        projection = Projection(
            messages=tuple(body), transcript_version=len(self.canonical),
            projection_version=version, covered_count=covered,
            covered_prefix_hash=covered_prefix_hash(self.canonical, covered),
            summary_hash=summary_hash, source_tokens=self.tokens, projection_tokens=new_tokens,
            view_input_hash=view_hash, view_output_hash=output_hash, created_at=stamp,
        )
        receipt = Receipt(
            operation_id=f"{action.value}-{version}-{output_hash[:12]}",
            status=Action.APPLIED, action=action, trigger=self.ctx.trigger,
            projection_version=version, covered_count=covered,
            covered_prefix_hash=projection.covered_prefix_hash, input_hash=view_hash,
            output_hash=output_hash, input_tokens=self.tokens, result_tokens=new_tokens,
            saved_tokens=saved, affected_tool_results=affected, summary_hash=summary_hash,
            cache_break=True, created_at=stamp,
            probes_before=checked.before if checked else None,
            probes_after=checked.after if checked else None,
            repaired=checked.repaired if checked else (),
        )
        record = self.record(
            kind="install", action=action.value, tokens_after=new_tokens, saved_tokens=saved,
            summary_calls=1 if summary_text else 0, detail=check_detail(checked), ledger=ledger,
            projection_version=version)
        try:
            if len(self.canonical) != captured.canonical_len:
                raise StaleContextError("context changed in this process during the operation")
            state = yield from self.commit(Commit(
                installed(captured, projection, receipt), record=record, captured=captured))
        except StaleContextError:
            # Another process may also have appended messages: work from what is stored.
            stored = yield Reread()
            if isinstance(stored, Stored):
                self.canonical, self.state = stored.canonical, stored.state
            self.refresh()
            yield from self.receipt(Action.BLOCKED, STALE, action)
            return False
        if state.last_receipt is not None:
            yield AfterInstall(state.last_receipt)
        return True

    def commit(self, step: Commit) -> Generator[Step, object, SidecarState]:
        """Yield ``step`` and take over the state the driver now holds."""
        state = yield step
        if isinstance(state, SidecarState):
            self.state = state
        return self.state

    # -- 6. record the receipt, and the ledger -----------------------------------------------

    def receipt(self, status: Action, reason: str, action: Action
                ) -> Generator[Step, object, None]:
        """Record a not-applied receipt (bumps the generation, not the projection version);
        the same failure for the same view in the same generation is not recorded twice."""
        if self.action is Action.NONE:
            self.action = status
        view_hash = self.input_hash()
        last = self.state.last_receipt
        if (last is not None and last.status == status and last.input_hash == view_hash
                and last.reason == reason and last.generation == self.state.generation):
            return
        receipt = Receipt(operation_id="", status=status, action=action,
                          trigger=self.ctx.trigger, input_hash=view_hash,
                          input_tokens=self.tokens, reason=reason)
        yield from self.commit(Commit(
            recorded(receipt, self.stamp()), record=self.record(
                kind="prepare", action=f"{action.value}:{status.value}",
                tokens_after=self.tokens, detail=reason)))

    def record(self, kind: Literal["prepare", "install", "thrash"], action: str, *,
               tokens_after: int, detail: str = "", saved_tokens: int = 0,
               summary_calls: int | None = None, ledger: LedgerEntry | None = None,
               projection_version: int = 0) -> TelemetryRecord:
        """A telemetry record of this run (the driver adds the cache figures it observed)."""
        return TelemetryRecord(
            kind=kind, trigger=self.ctx.trigger, action=action, tokens_before=self.tokens,
            tokens_after=tokens_after, saved_tokens=saved_tokens,
            summary_calls=self.summary_calls if summary_calls is None else summary_calls,
            projection_version=projection_version, detail=detail, created_at=self.stamp(),
            ledger=ledger, turn=self.ctx.turn)

    def shared(self, old: Sequence[Message], new: Sequence[Message]) -> int:
        """Estimated tokens of the prefix two requests with these messages share (with the
        tools, which come first)."""
        n = 0
        for a, b in zip(old, new, strict=False):
            if a != b:
                break
            n += 1
        return self.estimate(old[:n])

    def ledger(self, candidate: Sequence[Message], saved: int) -> LedgerEntry:
        """The estimated ledger entry of installing ``candidate`` (the first request's usage,
        when observed, replaces the cache figures: the engine's ``observe_cache``)."""
        observed = self.ctx.cached_tokens
        cached = self.tokens if observed is None else observed  # the last prompt + reply
        read = min(self.shared(self.view, candidate), cached)
        return attrs.evolve(self.summary_tokens, read=read, written=self.tokens - saved - read,
                            invalidated=cached - read, saved_per_request=saved,
                            requests=0, estimated=True)  # counted as they are sent

    def tally(self, request: SummaryRequest, answer: object) -> None:
        """Add one summary request to the ledger: its reported usage, else an estimate."""
        usage = answer.usage if isinstance(answer, SummaryResult) else None
        s = self.summary_tokens
        if usage is not None and not usage.estimated:
            prompt, read, output = (usage.prompt_tokens, usage.cache_hit_tokens,
                                    usage.completion_tokens)
        else:
            shape = RequestShape(list(request.messages), list(request.tools))
            prompt = self.ctx.estimator.estimate(shape)
            read = (self.shared(self.view, request.messages)
                    if tuple(request.tools) == tuple(self.ctx.tools) else 0)
            text = answer.text if isinstance(answer, SummaryResult) else ""
            output = self.ctx.count(Message(role="assistant", content=text))
        self.summary_tokens = attrs.evolve(
            s, summary_input=s.summary_input + prompt, summary_read=s.summary_read + read,
            summary_output=s.summary_output + output,
            summary_estimated=s.summary_estimated or usage is None or usage.estimated)

    def tallied(self, steps: Generator[Summarize, object, T]) -> Generator[Step, object, T]:
        """``yield from steps``, tallying each summary request it makes."""
        try:
            step = next(steps)
            while True:
                try:
                    answer = yield step
                except BaseException as exc:  # forwarded, as ``yield from`` would
                    step = steps.throw(exc)
                else:
                    self.tally(step.request, answer)
                    step = steps.send(answer)
        except StopIteration as stop:
            return stop.value


def check_detail(checked: CheckResult | None) -> str:
    """The telemetry detail of a checked summary install (``probes B -> A, N repaired``)."""
    if checked is None or checked.before is None or checked.after is None:
        return ""
    return (f"probes {checked.before:.2f} -> {checked.after:.2f}, "
            f"{len(checked.repaired)} repaired")


def installed(captured: Capture, projection: Projection, receipt: Receipt
              ) -> Callable[[SidecarState], SidecarState]:
    """The state change of an install: ``projection`` and its ``receipt`` over ``base``,
    the generation bumped. Another process's receipts and telemetry stay beneath it (were
    they to defeat installs, workers sharing a session at the trigger would block each
    other for good); another process's install makes it lose."""

    def change(base: SidecarState) -> SidecarState:
        version = base.projection.projection_version if base.projection else 0
        if version != captured.projection_version:
            raise StaleContextError("another process installed a checkpoint first")
        made = attrs.evolve(receipt, generation=base.generation + 1)
        return attrs.evolve(base, projection=projection, generation=base.generation + 1,
                            last_receipt=made)

    return change


def recorded(receipt: Receipt, stamp: str) -> Callable[[SidecarState], SidecarState]:
    """The state change of a blocked/failed/noop ``receipt``: stamped with the generation it
    makes and the projection it was made under."""

    def change(base: SidecarState) -> SidecarState:
        projection = base.projection
        generation = base.generation + 1
        made = attrs.evolve(
            receipt,
            operation_id=f"{receipt.status.value}-{generation}-{receipt.input_hash[:12]}",
            projection_version=projection.projection_version if projection else 0,
            covered_count=projection.covered_count if projection else 0,
            generation=generation, created_at=stamp,
        )
        return attrs.evolve(base, generation=generation, last_receipt=made)

    return change


def unchanged(base: SidecarState) -> SidecarState:
    """The state change of a telemetry record alone."""
    return base


# -- 7. the pure functions the path uses: the thrash guard's detection, the region, the -----
# summary request, the candidate, the check --------------------------------------------------

# The thrash guard (docs/checkpoints.md, "When checkpoints thrash"): runaway loops of 18–108
# compactions a night are reported of agents that have no such guard — each checkpoint leaves
# a view the next turn or two fill up again, and every fold pays for a summary. Detection
# reads only what the session recorded (its sidecar telemetry), so it survives a restart and
# sees the folds of other processes sharing the session; what is done about it is
# Run.fold's: a ``thrash`` record, a smaller verbatim tail, SummaryCapError past the cap.

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

TAIL_RATIO = 0.05
#: The verbatim tail of a checkpoint made while checkpoints thrash (the thrash guard, section 7):
#: 1 % of the window, so the fold takes all but the newest messages — the newest round is
#: kept whatever the budget — and leaves the next turns more room before the trigger.
THRASH_TAIL_RATIO = 0.01
HEAD_PIN_RATIO = 0.08
MIN_FOLD_TOKENS = 400
MIN_FOLD_MESSAGES = 2

TokenCount = Callable[[Message], int]


@attrs.frozen
class FoldPlan:
    """Where a fold cuts the view: ``view[head:end]`` folds, ``view[end:]`` stays verbatim."""

    head: int
    end: int
    tail_start: int


#: Marks a task statement the head keeps clipped (its full text stays in the transcript).
TASK_CLIP_PREFIX = "[... middle of the task statement omitted here"
TASK_CLIP_MARKER = (TASK_CLIP_PREFIX + "; its full text is message #{n} of this session: "
                    'use_capability "session:message" {{"ref": "#{n}"}} ...]')


def head_length(view: Sequence[Message], window: int, count: TokenCount) -> int:
    """Leading system message + the task statement (first user message). Pinned before the
    summary — verbatim while it is ≤ 8% of the window, else clipped to that
    (:func:`pinned_task`) — so successive checkpoints keep the same cached head."""
    head = 0
    if head < len(view) and view[head].role == "system":
        head += 1
    if head < len(view) and view[head].role == "user" and not is_summary_message(view[head]):
        head += 1
    return head


def pinned_task(message: Message, position: int, window: int, count: TokenCount) -> Message:
    """The task statement as the checkpoint head keeps it: unchanged within 8% of the
    window; larger, its first 3/4 and last 1/4 of that budget around a marker naming the
    canonical ``position`` of the full text. Idempotent (a clipped task stays as it is), so
    every checkpoint carries the same bytes."""
    tokens, text = count(message), message.content
    budget = HEAD_PIN_RATIO * window
    if tokens <= budget or message.parts or TASK_CLIP_PREFIX in text:
        return message
    marker = TASK_CLIP_MARKER.format(n=position)
    keep = max(0, int(len(text) * budget / tokens * 0.9) - len(marker))
    head = keep * 3 // 4
    clipped = f"{text[:head]}\n{marker}\n{text[len(text) - (keep - head):]}"
    return attrs.evolve(message, content=clipped, raw_content=None)


def tail_start(view: Sequence[Message], head: int, window: int, count: TokenCount,
               tail_ratio: float = TAIL_RATIO) -> int:
    """Start of the verbatim tail: newest messages within ``tail_ratio`` (5%) of the window,
    never starting on a tool result, always keeping the newest round: the last assistant
    message with its tool results, or the user turn that follows them (a finished round over
    budget folds)."""
    budget = int(window * tail_ratio)
    start = len(view)
    used = 0
    while start > head:
        tokens = count(view[start - 1])
        if used + tokens > budget:
            break
        used += tokens
        start -= 1
    # Never split an assistant tool call from its results.
    while head < start < len(view) and view[start].role == "tool":
        start -= 1
    # Keep at least the newest round: from the last assistant message, or from the first
    # message after its tool results (a user turn answering a finished round).
    last = next((i for i in range(len(view) - 1, head - 1, -1) if view[i].role == "assistant"),
                len(view) - 1)
    after = next((i for i in range(last + 1, len(view)) if view[i].role != "tool"), last)
    return max(min(start, after if last >= head and view[last].role == "assistant" else last), head)


def plan_fold(
    view: Sequence[Message],
    window: int,
    count: TokenCount,
    *,
    forced: bool,
    tail_ratio: float = TAIL_RATIO,
) -> FoldPlan | None:
    """The fold region between head and tail, or ``None`` when nothing worth folding remains
    (fewer than 2 messages, or under 400 tokens unless ``forced``); ``tail_ratio`` is
    :data:`THRASH_TAIL_RATIO` for a checkpoint made while checkpoints thrash."""
    head = head_length(view, window, count)
    start = tail_start(view, head, window, count, tail_ratio)
    if start - head < MIN_FOLD_MESSAGES:
        return None
    if not forced and sum(count(m) for m in view[head:start]) < MIN_FOLD_TOKENS:
        return None
    return FoldPlan(head=head, end=start, tail_start=start)


def balanced_ends(view: Sequence[Message], plan: FoldPlan) -> list[int]:
    """Fold ends that do not cut between an assistant tool call and its results."""
    return [
        end
        for end in range(plan.head + MIN_FOLD_MESSAGES, plan.tail_start + 1)
        if end == len(view) or view[end].role != "tool"
    ]


def largest_safe_end(ends: Sequence[int], fits: Callable[[int], bool]) -> int | None:
    """Binary search the largest end whose summary request fits (design §4.7)."""
    lo, hi, best = 0, len(ends) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(ends[mid]):
            best = ends[mid]
            lo = mid + 1
        else:
            hi = mid - 1
    return best


def fold_body(
    view: Sequence[Message],
    plan: FoldPlan,
    summary: Message,
    *,
    body_len: int,
    covered_count: int,
    canonical: Sequence[Message],
) -> tuple[list[Message], int]:
    """New projection body and its ``covered_count`` after folding ``view[head:end]``.

    A fold ending inside the old body keeps the old coverage and carries the unfolded rest of
    the old body verbatim; a fold reaching into the canonical tail extends coverage to the
    canonical index of the first unfolded message (the view skips ``local_only`` messages,
    so view positions are mapped back, never added).
    """
    body = [*view[: plan.head], summary]
    if plan.end <= body_len:
        body.extend(view[plan.end : body_len])
        return body, covered_count
    return body, canonical_index(canonical, covered_count, plan.end - body_len)


CLIP_MARKER = "[... middle omitted from the summary request ...]"
CLIP_MIN_CHARS = 1024


def clip_text(text: str, keep: int) -> str:
    """First 3/4 and last 1/4 of ``keep`` code points around :data:`CLIP_MARKER`."""
    if len(text) <= keep:
        return text
    head = keep * 3 // 4
    tail = keep - head
    return text[:head] + "\n" + CLIP_MARKER + "\n" + text[len(text) - tail :]


@attrs.frozen
class PlannedRequest:
    """The fold to make (``plan``) and the summary request that makes it."""

    plan: FoldPlan
    request: SummaryRequest


def summary_limit(window: int) -> int:
    """The most tokens a summary request may hold: the window minus the summary output cap
    and the protocol reserve."""
    return window - summary_output_cap(window) - PROTOCOL_RESERVE


def summary_request(
    view: Sequence[Message],
    plan: FoldPlan,
    *,
    tools: Sequence[ToolSchema],
    window: int,
    focus: str | None,
    cache_key: str,
    estimator: Estimator,
    count: Callable[[Message], int],
) -> PlannedRequest | None:
    """The summary request for ``plan`` that fits :func:`summary_limit`, with the fold end
    moved back when the whole region does not fit; ``None`` when no request can fit.

    The request replays the view from its start (pinned head included) so that it is a
    byte-prefix of the requests already sent and hits the provider's cache.
    """
    system = view[0] if view and view[0].role == "system" else None
    start = 1 if system is not None else 0
    limit = summary_limit(window)

    def request_for(end: int, begin: int = start) -> SummaryRequest:
        request = build_summary_request(system, view[begin:end], tools, window=window,
                                        focus=focus, target_tokens=briefing_tokens(window))
        return attrs.evolve(request, cache_key=cache_key)

    def fits(end: int, begin: int = start) -> bool:
        req = request_for(end, begin)
        return estimator.estimate(RequestShape(list(req.messages), req.tools)) <= limit

    if fits(plan.end):
        return PlannedRequest(plan, request_for(plan.end))
    ends = balanced_ends(view, plan)
    safe = largest_safe_end(ends, fits)
    if safe is not None:
        after = next((e for e in ends if e > safe), plan.end)  # the round that did not fit
        # Too little to free, or that round could never fold unclipped: clip instead.
        if (sum(count(m) for m in view[plan.head : safe]) >= MIN_FOLD_TOKENS
                and fits(after, safe)):
            return PlannedRequest(attrs.evolve(plan, end=safe), request_for(safe))
    # A message too large for any summary request (a 55k-token answer in a 32k window): the
    # whole region with its largest messages clipped, which misses the cache once.
    clipped = clipped_request(request_for(plan.end), limit, estimator)
    return PlannedRequest(plan, clipped) if clipped is not None else None


def clipped_request(
    request: SummaryRequest, limit: int, estimator: Estimator
) -> SummaryRequest | None:
    """``request`` with its largest region messages clipped until it fits ``limit``."""
    messages = list(request.messages)
    # Never clip the system message or the final instruction.
    editable = range(1 if messages and messages[0].role == "system" else 0, len(messages) - 1)
    for _ in range(32):
        total = estimator.estimate(RequestShape(messages, request.tools))
        if total <= limit:
            return attrs.evolve(request, messages=tuple(messages))
        i = max(editable, key=lambda k: len(messages[k].content), default=None)
        if i is None or len(messages[i].content) < 2 * CLIP_MIN_CHARS:
            return None
        excess = total - limit
        keep = max(CLIP_MIN_CHARS, len(messages[i].content) // 2 - excess * 2)
        messages[i] = attrs.evolve(
            messages[i], content=clip_text(messages[i].content, keep), raw_content=None,
        )
    return None


@attrs.frozen
class Candidate:
    """A projection ready to install — a checkpoint, or a prune over the whole transcript:
    its body, coverage and the view it gives; for a checkpoint ``summary`` is the summary's
    position in both, ``hint`` the lookup hint closing it, ``rules`` the pinned rules the
    view must carry."""

    body: list[Message]
    covered_count: int
    view: list[Message]
    summary: int = 0
    rules: tuple[str, ...] = ()
    hint: str = ""

    def with_summary(self, text: str) -> Candidate:
        """This candidate with the summary ``text`` instead (the same lookup hint)."""
        body, view = list(self.body), list(self.view)
        body[self.summary] = view[self.summary] = wrap_summary(text, self.hint)
        return attrs.evolve(self, body=body, view=view)


Pins = Callable[[Sequence[Message], int, Sequence[Message], int], PinBlock | None]


def candidate(
    view: Sequence[Message],
    plan: FoldPlan,
    text: str,
    *,
    projection: Projection | None,
    canonical: Sequence[Message],
    window: int,
    count: Callable[[Message], int],
    pruned: Sequence[Message] | None = None,
    pins: Pins | None = None,
) -> Candidate:
    """The projection that replaces ``view[plan.head:plan.end]`` with the summary ``text``.

    ``pruned`` (the view with its oversized tool results pruned, message for message) gives
    the kept messages in their pruned form: the prune is then part of this checkpoint.
    ``pins`` gives the standing rules placed between the head and the summary.
    """
    body, covered = fold_body(
        view, plan, wrap_summary(text), body_len=len(projection.messages) if projection else 0,
        covered_count=projection.covered_count if projection else 0, canonical=canonical)
    first = canonical_index(canonical, 0, plan.head)  # the head stays verbatim
    folded = covered
    hint = lookup_hint(canonical, first, covered)
    summary = wrap_summary(text, hint)
    if pruned is not None:  # kept messages in their pruned form: a body covering everything
        body, covered = [*pruned[: plan.head], summary, *pruned[plan.end :]], len(canonical)
    else:
        body[plan.head] = summary
    task = plan.head - 1
    if task >= 0 and body[task].role == "user":
        body[task] = pinned_task(body[task], canonical_index(canonical, 0, task), window,
                                      count)
    block = pins(canonical, folded, body[: plan.head], window) if pins is not None else None
    if block is not None:
        body.insert(plan.head, block.message)
    new_view = visible_view(Projection(messages=tuple(body), covered_count=covered), canonical)
    at = plan.head + (block is not None)
    return Candidate(body=body, covered_count=covered, view=new_view, summary=at,
                     rules=block.rules if block else (), hint=hint)


def check(
    checker: SummaryCheck, planned: PlannedRequest, made: Candidate, text: str,
    view: Sequence[Message], canonical: Sequence[Message], window: int,
) -> Generator[Summarize, object, tuple[CheckResult, int]]:
    """Check the summary ``text`` of ``made`` against its fold region; with the second pass
    on, a summary that lost facts is asked for once more (a failure there keeps the first
    text), then checked again. Returns the check's result and the extra summary calls made."""
    head = planned.plan.head
    region = view[head:planned.plan.end]
    kept = made.view[: made.summary] + made.view[made.summary + 1 :]
    task = canonical[canonical_index(canonical, 0, head - 1)] if head and \
        view[head - 1].role == "user" else None  # in full: the head may keep it clipped
    first = checker.check(region, kept, text, window, task)
    if not (first.lost and checker.second_pass):
        return first, 0
    try:
        answer = yield Summarize(revise_request(planned.request, text, first.lost))
        second = validate_summary_result(answer) if isinstance(answer, SummaryResult) else ""
    except CtxfoldError:
        second = ""
    if not second:
        return first, 1
    again = checker.check(region, kept, second, window, task)
    return attrs.evolve(again, before=first.before, lost=first.lost), 1
