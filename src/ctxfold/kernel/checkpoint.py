"""Building one checkpoint: the summary request of a planned fold and the candidate view.

Pure functions over the view (no I/O, no plugins): :func:`summary_request` chooses the fold
end whose cache-aligned summary request fits the window (design §4.7: the largest safe prefix;
when a round no request could hold blocks it, the region's largest messages are clipped in
the request instead — canonical keeps them); :func:`candidate` builds the new projection body
and the view it would give.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence

import attrs

from ctxfold.kernel import fold
from ctxfold.kernel.contracts import CheckpointReview, Estimator
from ctxfold.kernel.errors import CtxfoldError
from ctxfold.kernel.state import Projection
from ctxfold.kernel.summary import (
    briefing_tokens,
    build_summary_request,
    lookup_hint,
    revise_request,
    summary_output_cap,
    validate_summary_result,
    wrap_summary,
)
from ctxfold.kernel.types import (
    Message,
    PinBlock,
    RequestShape,
    Review,
    SummaryRequest,
    SummaryResult,
    ToolSchema,
)
from ctxfold.kernel.view import canonical_index, visible_view


@attrs.frozen
class PlannedRequest:
    """The fold to make (``plan``) and the summary request that makes it."""

    plan: fold.FoldPlan
    request: SummaryRequest


def summary_limit(window: int) -> int:
    """The most tokens a summary request may hold: the window minus the summary output cap
    and the protocol reserve."""
    return window - summary_output_cap(window) - fold.PROTOCOL_RESERVE


def summary_request(
    view: Sequence[Message],
    plan: fold.FoldPlan,
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
    ends = fold.balanced_ends(view, plan)
    safe = fold.largest_safe_end(ends, fits)
    if safe is not None:
        after = next((e for e in ends if e > safe), plan.end)  # the round that did not fit
        # Too little to free, or that round could never fold unclipped: clip instead.
        if (sum(count(m) for m in view[plan.head : safe]) >= fold.MIN_FOLD_TOKENS
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
        if i is None or len(messages[i].content) < 2 * fold.CLIP_MIN_CHARS:
            return None
        excess = total - limit
        keep = max(fold.CLIP_MIN_CHARS, len(messages[i].content) // 2 - excess * 2)
        messages[i] = attrs.evolve(
            messages[i], content=fold.clip_text(messages[i].content, keep), raw_content=None,
        )
    return None


@attrs.frozen
class Candidate:
    """A checkpoint ready to install: its body, coverage and the view it gives; ``summary``
    is the summary's position in both, ``hint`` the lookup hint closing it, ``rules`` the
    pinned rules the view must carry."""

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
    plan: fold.FoldPlan,
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
    body, covered = fold.fold_body(
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
        body[task] = fold.pinned_task(body[task], canonical_index(canonical, 0, task), window,
                                      count)
    block = pins(canonical, folded, body[: plan.head], window) if pins is not None else None
    if block is not None:
        body.insert(plan.head, block.message)
    new_view = visible_view(Projection(messages=tuple(body), covered_count=covered), canonical)
    at = plan.head + (block is not None)
    return Candidate(body=body, covered_count=covered, view=new_view, summary=at,
                     rules=block.rules if block else (), hint=hint)


def review(
    reviewer: CheckpointReview, planned: PlannedRequest, made: Candidate, text: str,
    view: Sequence[Message], canonical: Sequence[Message], window: int,
) -> Generator[SummaryRequest, object, tuple[Review, int]]:
    """Check the summary ``text`` of ``made`` against its fold region; with the second pass
    on, a summary that lost facts is asked for once more (a failure there keeps the first
    text), then checked again. Returns the review and the extra summary calls made."""
    head = planned.plan.head
    region = view[head:planned.plan.end]
    kept = made.view[: made.summary] + made.view[made.summary + 1 :]
    task = canonical[canonical_index(canonical, 0, head - 1)] if head and \
        view[head - 1].role == "user" else None  # in full: the head may keep it clipped
    checked = reviewer.review(region, kept, text, window, task)
    if not (checked.lost and reviewer.second_pass):
        return checked, 0
    try:
        answer = yield revise_request(planned.request, text, checked.lost)
        second = validate_summary_result(answer) if isinstance(answer, SummaryResult) else ""
    except CtxfoldError:
        second = ""
    if not second:
        return checked, 1
    again = reviewer.review(region, kept, second, window, task)
    return attrs.evolve(again, before=checked.before, lost=checked.lost), 1
