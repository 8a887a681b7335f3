"""The view: what the model sees now (design §2.1), and its incremental estimate.

The view is ``projection.messages + canonical[covered_count:]`` when a valid projection
exists, else the canonical transcript; ``local_only`` messages are never visible.
:class:`ViewTracker` keeps the view and its raw statistics between calls, so below the
trigger each ``prepare()`` costs O(new messages) with an
:class:`~ctxfold.kernel.contracts.IncrementalEstimator` (design §2.2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from ctxfold.kernel.contracts import Estimator, IncrementalEstimator
from ctxfold.kernel.fingerprint import fingerprint
from ctxfold.kernel.state import Projection
from ctxfold.kernel.types import Message, RequestShape, TextStats, ToolSchema


def visible_view(projection: Projection | None, canonical: Sequence[Message]) -> list[Message]:
    """Design §2.1: projection body + canonical tail when a projection exists, else canonical;
    ``local_only`` messages are never visible. A refreshed system prompt at the head of the
    canonical transcript replaces the one stored in the body (design §2.1, §5.4)."""
    if projection is None:
        return [m for m in canonical if not m.local_only]
    body = list(projection.messages)
    if body and body[0].role == "system" and canonical and canonical[0].role == "system":
        body[0] = canonical[0]
    return body + [m for m in canonical[projection.covered_count :] if not m.local_only]


def canonical_index(canonical: Sequence[Message], start: int, visible: int) -> int:
    """Index in ``canonical`` of the ``visible``-th provider-visible message at or after
    ``start`` (``len(canonical)`` when there are not that many)."""
    seen = 0
    for index in range(start, len(canonical)):
        if canonical[index].local_only:
            continue
        if seen == visible:
            return index
        seen += 1
    return len(canonical)


def message_counter(estimator: Estimator) -> Callable[[Message], int]:
    """The planning count of one message (tail sizing): the estimator's own cached
    per-message count when it is incremental, else a one-message shape."""
    if isinstance(estimator, IncrementalEstimator):
        return estimator.count_message

    def count(message: Message) -> int:
        return estimator.estimate(RequestShape([message]))

    return count


def input_hash(cache_key: str, view: Sequence[Message]) -> str:
    """The hash a receipt records for the view it acted on (the cache key included, so a
    model switch is a different input)."""
    return fingerprint([Message(role="system", content=cache_key), *view])


@attrs.frozen
class _Snapshot:
    """What the tracker saw last: extended in place while nothing but appends happened."""

    projection: Projection | None
    head: Message | None
    canonical_len: int
    tools: tuple[ToolSchema, ...]
    view: list[Message]
    stats: TextStats


class ViewTracker:
    """The current view and its admission estimate, computed incrementally.

    Between installs the view only grows by appended canonical messages, so with an
    :class:`IncrementalEstimator` the sum of the previous view is extended by the new
    messages only. Other estimators get the whole shape every time.
    """

    def __init__(self, estimator: Estimator) -> None:
        self.estimator = estimator
        self._last: _Snapshot | None = None

    def reset(self) -> None:
        """Forget the cached view (after a rewind or a re-read of the transcript)."""
        self._last = None

    def measure(
        self,
        projection: Projection | None,
        canonical: Sequence[Message],
        tools: tuple[ToolSchema, ...],
    ) -> tuple[list[Message], int]:
        """The view and its estimate. The list is the tracker's own (later appends extend
        it): read it, copy it, never mutate it."""
        est = self.estimator
        if not isinstance(est, IncrementalEstimator):
            view = visible_view(projection, canonical)
            return view, est.estimate(RequestShape(view, tools))
        head = canonical[0] if canonical else None
        last = self._last
        if (
            last is None
            or last.projection is not projection
            or last.head is not head
            or last.canonical_len > len(canonical)
            or last.tools is not tools
        ):
            view = visible_view(projection, canonical)
            stats = est.shape_stats(RequestShape(view, tools))
        else:
            view, stats = last.view, last.stats
            for message in canonical[last.canonical_len :]:
                if not message.local_only:
                    view.append(message)
                    stats = stats + est.message_stats(message)
        self._last = _Snapshot(projection, head, len(canonical), tools, view, stats)
        return view, int(est.scale(stats))
