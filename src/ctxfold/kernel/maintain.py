"""``prepare()``: prune first, then at most N summary folds, each CAS-committed (SPEC §3.2).

Below the trigger nothing is written: no projection, no sidecar write, no summary call, no
event. Above it, oversized tool results are pruned first; if that does not clear the
pressure, the fold region is summarized into one checkpoint. Every outcome leaves a receipt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ctxfold.kernel import fold as folding
from ctxfold.kernel.commit import Capture, StaleContextError, blocked_receipt
from ctxfold.kernel.errors import CompactionRequiredError, CtxfoldError, SummaryFailedError
from ctxfold.kernel.fingerprint import content_hash, fingerprint
from ctxfold.kernel.strategies import SummaryRequest
from ctxfold.kernel.summary import (
    build_summary_request,
    summary_output_cap,
    validate_summary_result,
    wrap_summary,
)
from ctxfold.kernel.types import (
    Message,
    Projection,
    Receipt,
    ReceiptAction,
    ReceiptStatus,
    RequestShape,
)

if TYPE_CHECKING:
    from ctxfold.kernel.engine import ContextManager, PreparedRequest, PrepareTrigger

#: Summary attempts per prepare: 2 under pressure, 1 on overflow, 1 manual (4 manual above
#: the hard ceiling).
MAX_SUMMARIES = {"pressure": 2, "overflow": 1, "manual": 1}
MANUAL_RESCUE_SUMMARIES = 4
ABOVE_TRIGGER = "summary result remains above fold trigger after {n} attempts"
NO_REGION = "above the maintenance threshold but no foldable region remains"
NOTHING_TO_FOLD = (
    "nothing to fold: the recent tail (16% of the window) and the pinned head already hold "
    "the whole conversation"
)
NOT_SMALLER = "checkpoint candidate is not smaller than the request it replaces"
ABOVE_CEILING = "checkpoint candidate is not below the hard ceiling"
NO_SAFE_PREFIX = "no summary request fits the window"
STALE = "context changed during summary; automatic retry blocked for this generation"


class _Run:
    """One prepare() call: the view it is working on and what it did."""

    def __init__(self, cm: ContextManager, trigger: PrepareTrigger, focus: str | None) -> None:
        self.cm = cm
        self.trigger = trigger
        self.focus = focus
        # Read-only for the whole prepare(): refresh() replaces it, nothing mutates it.
        self.view, self.tokens = cm.view_estimate()
        self.summary_calls = 0
        self.action = "none"
        self.pruned = False

    def result(self) -> PreparedRequest:
        from ctxfold.kernel.engine import PreparedRequest

        projection = self.cm.state.projection
        return PreparedRequest(
            messages=tuple(self.view),
            tools=self.cm.tools,
            tokens=self.tokens,
            projection_version=projection.projection_version if projection else 0,
            trigger_tokens=self.cm.trigger_tokens,
            summary_calls=self.summary_calls,
            action=self.action,
            pruned=self.pruned,
        )

    def refresh(self) -> None:
        self.view, self.tokens = self.cm.view_estimate()

    def receipt(self, status: ReceiptStatus, reason: str, action: ReceiptAction) -> Receipt:
        cm = self.cm
        if self.action == "none":
            self.action = status.value
        return cm.committer.record(
            blocked_receipt(
                status,
                self.trigger,
                reason,
                input_hash=cm.input_hash(self.view),
                input_tokens=self.tokens,
                action=action,
            ),
            cm.committer.telemetry(
                kind="prepare",
                trigger=self.trigger,
                action=f"{action.value}:{status.value}",
                tokens_before=self.tokens,
                tokens_after=self.tokens,
                summary_calls=self.summary_calls,
                detail=reason,
            ),
        )

    def _install(
        self,
        captured: Capture,
        input_hash: str,
        action: ReceiptAction,
        *,
        body: list[Message],
        covered: int,
        candidate: list[Message],
        new_tokens: int,
        affected: int = 0,
        summary_text: str = "",
    ) -> bool:
        """CAS-commit a prune or summary projection; False (and a blocked receipt) if the
        context moved while the operation ran."""
        cm = self.cm
        output_hash = fingerprint(candidate)
        summary_hash = content_hash(summary_text) if summary_text else ""
        saved = self.tokens - new_tokens
        try:
            cm.committer.install(
                captured,
                cm.canonical,
                body=body,
                covered_count=covered,
                receipt=Receipt(
                    operation_id="",
                    status=ReceiptStatus.APPLIED,
                    action=action,
                    trigger=self.trigger,
                    input_hash=input_hash,
                    output_hash=output_hash,
                    input_tokens=self.tokens,
                    result_tokens=new_tokens,
                    saved_tokens=saved,
                    affected_tool_results=affected,
                    summary_hash=summary_hash,
                ),
                telemetry=cm.committer.telemetry(
                    kind="install",
                    trigger=self.trigger,
                    action=action.value,
                    tokens_before=self.tokens,
                    tokens_after=new_tokens,
                    saved_tokens=saved,
                    summary_calls=1 if summary_text else 0,
                ),
                source_tokens=self.tokens,
                projection_tokens=new_tokens,
                summary_hash=summary_hash,
                view_input_hash=input_hash,
                view_output_hash=output_hash,
            )
        except StaleContextError:
            cm.sync_from_store()  # another process may also have appended messages
            self.refresh()
            self.receipt(ReceiptStatus.BLOCKED, STALE, action)
            return False
        return True

    # -- prune -------------------------------------------------------------------------------

    def prune(self) -> bool:
        cm = self.cm
        pruned = cm.pruner.prune(self.view)
        if pruned is None:
            return False
        new_view, affected = pruned
        new_tokens = cm.estimate(new_view)
        if new_tokens >= self.tokens:
            return False
        if not self._install(
            cm.capture(), cm.input_hash(self.view), ReceiptAction.PRUNE,
            body=new_view, covered=len(cm.canonical), candidate=new_view,
            new_tokens=new_tokens, affected=affected,
        ):
            return False
        self.action = "prune"
        self.pruned = True
        self.refresh()
        return True

    # -- fold --------------------------------------------------------------------------------

    def _clipped_request(self, request: SummaryRequest, limit: int) -> SummaryRequest | None:
        """``request`` with its largest region messages clipped until it fits ``limit``."""
        estimator = self.cm.estimator
        messages = list(request.messages)
        # Never clip the system message or the final instruction.
        editable = range(1 if messages and messages[0].role == "system" else 0, len(messages) - 1)
        for _ in range(32):
            total = estimator.estimate(RequestShape(messages, request.tools))
            if total <= limit:
                return attrs.evolve(request, messages=tuple(messages))
            i = max(editable, key=lambda k: len(messages[k].content), default=None)
            if i is None or len(messages[i].content) < 2 * folding.CLIP_MIN_CHARS:
                return None
            excess = total - limit
            keep = max(folding.CLIP_MIN_CHARS, len(messages[i].content) // 2
                       - excess * 2)
            messages[i] = attrs.evolve(
                messages[i], content=folding.clip_text(messages[i].content, keep),
                raw_content=None,
            )
        return None

    def fold(self, forced: bool) -> str:
        """One summary fold. Returns installed | noop | failed | rejected | stale."""
        cm = self.cm
        window = cm.window
        planned = folding.plan_fold(self.view, window, cm._count, forced=forced)
        if planned is None:
            if self.trigger == "manual":  # asked for, but there is simply nothing to fold
                self.receipt(ReceiptStatus.NOOP, NOTHING_TO_FOLD, ReceiptAction.NOOP)
            else:  # blocked: not retried for this view in this generation
                self.receipt(ReceiptStatus.BLOCKED, NO_REGION, ReceiptAction.NOOP)
            return "noop"
        plan = planned
        system = self.view[0] if self.view and self.view[0].role == "system" else None
        limit = window - summary_output_cap(window) - folding.PROTOCOL_RESERVE

        # The request replays the view from its start (pinned head included) so that it is
        # a byte-prefix of the requests already sent and hits the provider's cache.
        start = 1 if system is not None else 0

        def request_for(end: int) -> SummaryRequest:
            request = build_summary_request(
                system, self.view[start:end], cm.tools, window=window, focus=self.focus
            )
            return attrs.evolve(request, cache_key=cm.state.prompt_cache_key)

        def fits(end: int) -> bool:
            req = request_for(end)
            return cm.estimator.estimate(RequestShape(list(req.messages), req.tools)) <= limit

        end = plan.end
        request: SummaryRequest | None = None
        if not fits(end):
            safe = folding.largest_safe_end(folding.balanced_ends(self.view, plan), fits)
            if safe is not None and (
                sum(cm._count(m) for m in self.view[plan.head : safe]) < folding.MIN_FOLD_TOKENS
            ):
                safe = None  # folding so little cannot free anything; clip instead
            if safe is None:
                # Even the smallest fold holds a message too large for any summary request
                # (e.g. a 55k-token assistant message in a 64k window): summarize the whole
                # region with its largest messages clipped. The request then misses the cache
                # once; the alternative is failing the session.
                request = self._clipped_request(request_for(end), limit)
                if request is None:
                    self.receipt(ReceiptStatus.BLOCKED, NO_SAFE_PREFIX, ReceiptAction.SUMMARY)
                    return "rejected"
            else:
                end = safe
        plan = folding.FoldPlan(head=plan.head, end=end, tail_start=plan.tail_start)
        if request is None:
            request = request_for(end)
        captured = cm.capture()
        input_hash = cm.input_hash(self.view)
        self.summary_calls += 1
        cm.summary_calls += 1
        if self.trigger != "manual":
            cm.progress.summary_turn = cm.turn  # one turn never pays two automatic summaries
        try:
            text = validate_summary_result(cm.summarizer.summarize(request))
        except CtxfoldError as exc:
            status = (
                ReceiptStatus.BLOCKED
                if isinstance(exc, SummaryFailedError)
                else ReceiptStatus.FAILED
            )
            self.receipt(status, f"summary failed: {exc}", ReceiptAction.SUMMARY)
            cm.progress.failed_turn = cm.turn
            if self.trigger == "manual":
                raise
            return "failed"
        summary = wrap_summary(text)
        projection = cm.state.projection
        body, covered = folding.fold_body(
            self.view,
            plan,
            summary,
            body_len=len(projection.messages) if projection else 0,
            covered_count=projection.covered_count if projection else 0,
            canonical=cm.canonical,
        )
        canonical = cm.canonical
        candidate = folding.visible_view(
            Projection(messages=tuple(body), covered_count=covered), canonical
        )
        new_tokens = cm.estimate(candidate)
        if new_tokens >= self.tokens:
            self.receipt(ReceiptStatus.BLOCKED, NOT_SMALLER, ReceiptAction.SUMMARY)
            return "rejected"
        if self.trigger != "manual" and new_tokens >= cm.hard_ceiling:
            self.receipt(ReceiptStatus.BLOCKED, ABOVE_CEILING, ReceiptAction.SUMMARY)
            return "rejected"
        if not self._install(
            captured, input_hash, ReceiptAction.SUMMARY, body=body, covered=covered,
            candidate=candidate, new_tokens=new_tokens, summary_text=text,
        ):
            return "stale"
        self.action = "summary"
        self.refresh()
        return "installed"


def run_prepare(
    cm: ContextManager, trigger: PrepareTrigger, focus: str | None
) -> PreparedRequest:
    """The body of :meth:`ContextManager.prepare`."""
    run = _Run(cm, trigger, focus)
    fold_at, hard = cm.trigger_tokens, cm.hard_ceiling
    progress = cm.progress
    if trigger == "pressure":
        if run.tokens < fold_at:
            progress.clear()
            return run.result()
        input_hash = cm.input_hash(run.view)
        last = cm.state.last_receipt
        if run.tokens < hard and (
            (
                last is not None
                and last.status in (ReceiptStatus.BLOCKED, ReceiptStatus.FAILED)
                and last.input_hash == input_hash
                and last.generation == cm.state.generation
            )
            or progress.stuck_hash == input_hash
            or progress.failed_turn == cm.turn
        ):
            return run.result()
    must_free = trigger == "overflow" or run.tokens >= hard
    if (trigger != "manual" or run.tokens >= hard) and run.prune() and (
        (trigger == "pressure" and run.tokens < fold_at)
        or (trigger != "pressure" and run.tokens < hard)
    ):
        return run.result()
    attempts = MAX_SUMMARIES[trigger]
    if trigger == "manual" and run.tokens >= hard:
        attempts = MANUAL_RESCUE_SUMMARIES
    outcome = ""
    for _ in range(attempts):
        if (
            trigger == "pressure"
            and run.summary_calls == 0
            and progress.summary_turn == cm.turn
            and run.tokens < hard
        ):
            break  # one turn never pays two automatic summaries (a rescue above hard may)
        outcome = run.fold(forced=trigger == "manual" or must_free)
        if outcome != "installed":
            break
        if run.tokens < fold_at or (trigger != "pressure" and run.tokens < hard):
            progress.clear()
            return run.result()
        must_free = trigger == "overflow" or run.tokens >= hard
    if outcome == "installed" and run.tokens >= fold_at:
        run.receipt(
            ReceiptStatus.BLOCKED,
            ABOVE_TRIGGER.format(n=run.summary_calls),
            ReceiptAction.SUMMARY,
        )
        progress.stuck_hash = cm.input_hash(run.view)
    if run.tokens >= hard:
        raise CompactionRequiredError(
            f"session {cm.session_id!r}: request of {run.tokens} tokens is at or above the hard "
            f"ceiling {hard} (window {cm.window}) and no checkpoint could be installed; "
            f"last receipt: {cm.state.last_receipt.reason if cm.state.last_receipt else 'none'}"
        )
    return run.result()


__all__ = ["run_prepare"]
