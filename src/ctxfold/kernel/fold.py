"""Planning a fold: head, 5% tail, fold region, safe prefix, new body (design §4.1–§4.3, §4.7).

Pure functions over a view (``projection.messages + canonical[covered_count:]``). The view
is described by ``body_len`` (how many leading view messages come from the projection body)
and ``covered_count`` (how many canonical messages that body stands for), so a fold can be
mapped back to canonical coverage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from ctxfold.kernel.summary import is_summary_message
from ctxfold.kernel.types import Message
from ctxfold.kernel.view import canonical_index

TAIL_RATIO = 0.05
#: The verbatim tail of a checkpoint made while checkpoints thrash (ctxfold.kernel.thrash):
#: 1 % of the window, so the fold takes all but the newest messages — the newest round is
#: kept whatever the budget — and leaves the next turns more room before the trigger.
THRASH_TAIL_RATIO = 0.01
HEAD_PIN_RATIO = 0.08
MIN_FOLD_TOKENS = 400
MIN_FOLD_MESSAGES = 2
PROTOCOL_RESERVE = 256

TokenCount = Callable[[Message], int]


@attrs.frozen
class FoldPlan:
    """Where a fold cuts the view: ``view[head:end]`` folds, ``view[end:]`` stays verbatim."""

    head: int
    end: int
    tail_start: int

    @property
    def size(self) -> int:
        return self.end - self.head


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
