"""One maintenance run's operations: prune, fold, install, receipt (design §2.5, §3.3, §4).

The state of one ``prepare()`` (:class:`Run`); the values it starts from and ends with are
:mod:`ctxfold.kernel.outcome`. The decisions — which operation when — are
:func:`ctxfold.kernel.maintenance.maintain`. Operations that need the outside world are
generators: a summary is a yielded :class:`~ctxfold.kernel.types.SummaryRequest`, a re-read
of the transcript after a lost compare-and-swap a yielded :data:`RESYNC`.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TypeVar

import attrs

from ctxfold.kernel import checkpoint, fold, thrash
from ctxfold.kernel.commit import Capture, blocked_receipt
from ctxfold.kernel.errors import CtxfoldError, StaleContextError, SummaryFailedError
from ctxfold.kernel.fingerprint import content_hash, fingerprint
from ctxfold.kernel.ledger import LedgerEntry
from ctxfold.kernel.outcome import (
    RESYNC,
    FoldResult,
    MaintenanceContext,
    Outcome,
    PrepareAction,
    Pruned,
    Step,
)
from ctxfold.kernel.state import Receipt, ReceiptAction, ReceiptStatus
from ctxfold.kernel.summary import validate_summary_result
from ctxfold.kernel.types import (
    Message,
    RequestShape,
    Review,
    SummaryRequest,
    SummaryResult,
)
from ctxfold.kernel.view import input_hash, visible_view

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

T = TypeVar("T")


def checked(reviewed: Review | None) -> str:
    """The telemetry detail of a checked summary install (``probes B -> A, N repaired``)."""
    if reviewed is None or reviewed.before is None or reviewed.after is None:
        return ""
    return (f"probes {reviewed.before:.2f} -> {reviewed.after:.2f}, "
            f"{len(reviewed.repaired)} repaired")


class Run:
    """The mutable state of one ``prepare()``: the view it works on and what it did."""

    def __init__(self, ctx: MaintenanceContext, view: list[Message], tokens: int) -> None:
        self.ctx = ctx
        self.canonical = ctx.canonical
        self.view, self.tokens = view, tokens
        self.latches = ctx.latches
        self.summary_calls = 0
        self.action = PrepareAction.NONE
        self.pruned = False
        #: The ledger's summary figures of the fold under way (input, read, output).
        self.summary_tokens = LedgerEntry(estimated=False)
        #: What the thrash guard saw in this run (its folds then keep the smaller tail).
        self.thrash: thrash.Thrash | None = None
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
        self.view = visible_view(self.ctx.committer.state.projection, self.canonical)
        self.tokens = self.estimate(self.view)

    def input_hash(self) -> str:
        return input_hash(self.ctx.committer.state.prompt_cache_key, self.view)

    def receipt(self, status: ReceiptStatus, reason: str, action: ReceiptAction) -> Receipt:
        ctx = self.ctx
        if self.action is PrepareAction.NONE:
            self.action = PrepareAction(status.value)
        return ctx.committer.record(
            blocked_receipt(status, ctx.trigger, reason, input_hash=self.input_hash(),
                            input_tokens=self.tokens, action=action),
            ctx.committer.telemetry(
                kind="prepare", trigger=ctx.trigger, action=f"{action.value}:{status.value}",
                tokens_before=self.tokens, tokens_after=self.tokens,
                summary_calls=self.summary_calls, detail=reason, turn=ctx.turn,
            ),
        )

    def install(
        self, captured: Capture, view_hash: str, action: ReceiptAction, *,
        body: list[Message], covered: int, candidate: list[Message], new_tokens: int,
        affected: int = 0, summary_text: str = "", reviewed: Review | None = None,
    ) -> Generator[Step, object, bool]:
        """CAS-commit a prune or summary projection; False (and a blocked receipt) if the
        context moved while the operation ran."""
        ctx = self.ctx
        output_hash = fingerprint(candidate)
        summary_hash = content_hash(summary_text) if summary_text else ""
        saved = self.tokens - new_tokens
        ledger = self.ledger(candidate, saved)
        self.summary_tokens = LedgerEntry(estimated=False)  # the next fold's own
        try:
            ctx.committer.install(
                captured, self.canonical, body=body, covered_count=covered,
                receipt=Receipt(
                    operation_id="", status=ReceiptStatus.APPLIED, action=action,
                    trigger=ctx.trigger, input_hash=view_hash, output_hash=output_hash,
                    input_tokens=self.tokens, result_tokens=new_tokens, saved_tokens=saved,
                    affected_tool_results=affected, summary_hash=summary_hash,
                    probes_before=reviewed.before if reviewed else None,
                    probes_after=reviewed.after if reviewed else None,
                    repaired=reviewed.repaired if reviewed else (),
                ),
                telemetry=ctx.committer.telemetry(
                    kind="install", trigger=ctx.trigger, action=action.value,
                    tokens_before=self.tokens, tokens_after=new_tokens, saved_tokens=saved,
                    summary_calls=1 if summary_text else 0, detail=checked(reviewed),
                    ledger=ledger,
                    turn=ctx.turn,
                ),
                source_tokens=self.tokens, projection_tokens=new_tokens,
                summary_hash=summary_hash, view_input_hash=view_hash,
                view_output_hash=output_hash,
            )
        except StaleContextError:
            # Another process may also have appended messages: work from what is stored.
            reread = yield RESYNC
            if isinstance(reread, Sequence):  # the stored transcript, whatever its length
                self.canonical = reread
            self.refresh()
            self.receipt(ReceiptStatus.BLOCKED, STALE, action)
            return False
        return True

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
        when observed, replaces the cache figures: :meth:`Committer.observe_cache`)."""
        observed = self.ctx.committer.cached_tokens
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

    def tallied(self, steps: Generator[SummaryRequest, object, T]
                ) -> Generator[Step, object, T]:
        """``yield from steps``, tallying each summary request it makes."""
        try:
            step = next(steps)
            while True:
                try:
                    answer = yield step
                except BaseException as exc:  # forwarded, as ``yield from`` would
                    step = steps.throw(exc)
                else:
                    self.tally(step, answer)
                    step = steps.send(answer)
        except StopIteration as stop:
            return stop.value

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
        captured = self.ctx.committer.capture(len(self.canonical))
        if not (yield from self.install(
            captured, self.input_hash(), ReceiptAction.PRUNE, body=pruned.view,
            covered=len(self.canonical), candidate=pruned.view, new_tokens=pruned.tokens,
            affected=pruned.affected,
        )):
            return False
        self.action = PrepareAction.PRUNE
        self.pruned = True
        self.refresh()
        return True

    def plan(self, forced: bool) -> fold.FoldPlan | None:
        """The fold of the view: with the smaller tail while checkpoints thrash."""
        ratio = fold.THRASH_TAIL_RATIO if self.thrash is not None else fold.TAIL_RATIO
        return fold.plan_fold(self.view, self.ctx.window, self.ctx.count, forced=forced,
                              tail_ratio=ratio)

    def guard(self) -> None:
        """Before a summary is asked for: raise :class:`SummaryCapError` when it would pass
        the cap, and say once per run that checkpoints thrash (a ``thrash`` record each)."""
        ctx = self.ctx
        committer = ctx.committer
        error = thrash.over_cap(committer.state.telemetry, now=committer.clock(),
                                limit=ctx.max_summaries_per_hour, session_id=ctx.session_id)
        last = committer.state.telemetry[-1] if committer.state.telemetry else None
        if error is not None:
            if last is None or (last.kind, last.action) != ("thrash", "cap"):  # once a spell
                self.note("cap", str(error))
            raise error
        if self.thrash is not None and not self.noted:
            self.noted = True
            self.note(self.thrash.action, f"{self.thrash.detail}; this checkpoint keeps a "
                      f"verbatim tail of {fold.THRASH_TAIL_RATIO:.0%} of the window, not "
                      f"{fold.TAIL_RATIO:.0%}")

    def note(self, action: str, detail: str) -> None:
        """Record a ``thrash`` telemetry record: what the guard saw and what it did."""
        ctx = self.ctx
        projection = ctx.committer.state.projection
        ctx.committer.note(ctx.committer.telemetry(
            kind="thrash", trigger=ctx.trigger, action=action, tokens_before=self.tokens,
            tokens_after=self.tokens, summary_calls=self.summary_calls, detail=detail,
            projection_version=projection.projection_version if projection else 0,
            turn=ctx.turn,
        ))

    def fold(
        self, forced: bool, pruned: Pruned | None = None
    ) -> Generator[Step, object, FoldResult]:
        """One summary fold; with ``pruned``, the kept tail is taken from the pruned view (the
        prune is applied inside the checkpoint instead of being installed alone)."""
        ctx = self.ctx
        automatic = ctx.trigger != "manual"  # a compaction asked for is never thrash
        if automatic and self.summary_calls == 0:  # the run's folds after it go on from it
            self.thrash = thrash.refilled(ctx.committer.state.telemetry, ctx.turn)
        plan = self.plan(forced)
        if automatic and plan is not None and self.thrash is None:
            self.thrash = thrash.same_span(self.view[plan.head:plan.end], ctx.count)
            plan = self.plan(forced) if self.thrash is not None else plan
        if plan is None:
            if ctx.trigger == "manual":  # asked for, but there is simply nothing to fold
                self.receipt(ReceiptStatus.NOOP, NOTHING_TO_FOLD, ReceiptAction.NOOP)
            else:  # blocked: not retried for this view in this generation
                self.receipt(ReceiptStatus.BLOCKED, NO_REGION, ReceiptAction.NOOP)
            return FoldResult.NOTHING
        planned = checkpoint.summary_request(
            self.view, plan, tools=ctx.tools, window=ctx.window, focus=ctx.focus,
            cache_key=ctx.committer.state.prompt_cache_key, estimator=ctx.estimator,
            count=ctx.count,
        )
        if planned is None:
            self.receipt(ReceiptStatus.BLOCKED, NO_SAFE_PREFIX, ReceiptAction.SUMMARY)
            return FoldResult.REJECTED
        # Captured before the guard's note: a note that loses its compare-and-swap adopts
        # another process's commit, which the install's check must then see as stale.
        captured = ctx.committer.capture(len(self.canonical))
        self.guard()
        view_hash = self.input_hash()
        self.summary_calls += 1
        if ctx.trigger != "manual":  # one turn never pays two automatic summaries
            self.latches = attrs.evolve(self.latches, summary_turn=ctx.turn)
        try:
            answer = yield planned.request
            self.tally(planned.request, answer)
            if not isinstance(answer, SummaryResult):
                raise SummaryFailedError(
                    f"summarizer returned {type(answer).__name__}, not a SummaryResult")
            text = validate_summary_result(answer)
        except CtxfoldError as exc:
            status = (ReceiptStatus.BLOCKED if isinstance(exc, SummaryFailedError)
                      else ReceiptStatus.FAILED)
            self.receipt(status, f"summary failed: {exc}", ReceiptAction.SUMMARY)
            self.latches = attrs.evolve(self.latches, failed_turn=ctx.turn)
            if ctx.trigger == "manual":
                raise
            return FoldResult.FAILED
        made = checkpoint.candidate(
            self.view, planned.plan, text, projection=ctx.committer.state.projection,
            canonical=self.canonical, window=ctx.window, count=ctx.count,
            pruned=pruned.view if pruned else None, pins=ctx.review.pins if ctx.review else None)
        reviewed = None
        if ctx.review is not None:
            reviewed, calls = yield from self.tallied(checkpoint.review(
                ctx.review, planned, made, text, self.view, self.canonical, ctx.window))
            self.summary_calls += calls
            made = made.with_summary(reviewed.text)  # the same body, hint and rules
        missing = [r for r in made.rules if not any(r in m.content for m in made.view)]
        if missing:
            self.receipt(ReceiptStatus.BLOCKED, LACKS_PIN.format(rule=missing[0][:80]),
                         ReceiptAction.SUMMARY)
            return FoldResult.REJECTED
        new_tokens = self.estimate(made.view)
        if new_tokens >= self.tokens:
            self.receipt(ReceiptStatus.BLOCKED, NOT_SMALLER, ReceiptAction.SUMMARY)
            return FoldResult.REJECTED
        if (ctx.trigger != "manual" and new_tokens >= ctx.hard_ceiling
                and self.tokens < ctx.hard_ceiling):
            # (Above the ceiling already, any smaller checkpoint is progress: the rescue
            # folds again from it, and a later prepare goes on from what was installed.)
            self.receipt(ReceiptStatus.BLOCKED, ABOVE_CEILING, ReceiptAction.SUMMARY)
            return FoldResult.REJECTED
        if not (yield from self.install(
            captured, view_hash, ReceiptAction.SUMMARY, body=made.body,
            covered=made.covered_count, candidate=made.view, new_tokens=new_tokens,
            summary_text=reviewed.text if reviewed else text, reviewed=reviewed,
            affected=pruned.affected if pruned else 0,
        )):
            return FoldResult.STALE
        self.action = PrepareAction.SUMMARY
        self.pruned = self.pruned or pruned is not None
        self.refresh()
        return FoldResult.INSTALLED


