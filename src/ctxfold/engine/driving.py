"""Running a maintenance generator (``ctxfold.kernel.maintenance.maintain``) to its end.

The generator yields a :class:`~ctxfold.kernel.types.SummaryRequest` when it needs a summary
and :data:`~ctxfold.kernel.outcome.RESYNC` when a lost compare-and-swap means the
transcript must be re-read; :func:`drive` answers with a synchronous summarizer,
:func:`adrive` with an awaitable one, so both faces of ``prepare()`` share one logic.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import attrs

from ctxfold.kernel.errors import CtxfoldError
from ctxfold.kernel.outcome import RESYNC, Maintenance, Outcome
from ctxfold.kernel.types import Message, SummaryRequest, SummaryResult
from ctxfold.message_checks import repair_surrogates


def _text_repaired(result: SummaryResult) -> SummaryResult:
    """A summary whose text holds a lone surrogate (a model's escaped emoji split in two)
    with it repaired: such text cannot be hashed, stored or sent as UTF-8."""
    if isinstance(result, SummaryResult) and isinstance(result.text, str):
        text = repair_surrogates(result.text)
        if text is not result.text:
            return attrs.evolve(result, text=text)
    return result


def drive(
    steps: Maintenance,
    summarize: Callable[[SummaryRequest], SummaryResult],
    reread: Callable[[], Sequence[Message]],
) -> Outcome:
    """Run :func:`maintain` with a synchronous summarizer: :func:`adrive` over an awaitable
    that never suspends, so it completes in one step without an event loop (one loop for
    both faces)."""

    async def now(request: SummaryRequest) -> SummaryResult:
        return summarize(request)

    run = adrive(steps, now, reread)
    try:
        run.send(None)
    except StopIteration as stop:
        outcome: Outcome = stop.value
        return outcome
    run.close()
    raise RuntimeError("maintenance suspended under a synchronous summarizer")


async def adrive(
    steps: Maintenance,
    summarize: Callable[[SummaryRequest], Awaitable[SummaryResult]],
    reread: Callable[[], Sequence[Message]],
) -> Outcome:
    """Run :func:`maintain` with an asynchronous summarizer."""
    answer: object = None
    error: CtxfoldError | None = None
    try:
        while True:
            step = steps.throw(error) if error is not None else steps.send(answer)
            answer, error = None, None
            if step is RESYNC:
                answer = reread()
                continue
            assert isinstance(step, SummaryRequest)
            try:
                answer = _text_repaired(await summarize(step))
            except CtxfoldError as exc:
                error = exc
    except StopIteration as stop:
        outcome: Outcome = stop.value
        return outcome
