"""The engine's one driver: runs a generator of typed steps, performing each.

The fold path (:func:`ctxfold.kernel.maintenance.maintain`) and one model turn
(:func:`ctxfold.engine.turn.turn`) are generators that do no I/O: they yield a step for each
effect and are sent its reply, or have its error thrown in at the ``yield`` when the step's
class names that error in ``thrown`` (any other error of the effect propagates, as it would
from a direct call). :func:`adrive` runs one with an awaitable ``perform``; :func:`drive`
with a plain one, over the same loop (an awaitable that never suspends completes in one
step, without an event loop), so the sync and async faces share one definition.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import TypeVar

from ctxfold.kernel.errors import CtxfoldError

S = TypeVar("S")
R = TypeVar("R")


async def adrive(steps: Generator[S, object, R],
                 perform: Callable[[S], Awaitable[object]]) -> R:
    """Run ``steps`` to its end, awaiting ``perform`` of each step; return its value."""
    answer: object = None
    error: CtxfoldError | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(answer)
        except StopIteration as stop:
            result: R = stop.value
            return result
        answer, error = None, None
        try:
            answer = await perform(step)
        except CtxfoldError as exc:
            if not isinstance(exc, getattr(type(step), "thrown", ())):
                raise
            error = exc


def drive(steps: Generator[S, object, R], perform: Callable[[S], object]) -> R:
    """:func:`adrive` with a synchronous ``perform``, without an event loop."""

    async def now(step: S) -> object:
        return perform(step)

    run = adrive(steps, now)
    try:
        run.send(None)
    except StopIteration as stop:
        result: R = stop.value
        return result
    run.close()
    raise RuntimeError("a synchronous drive suspended")
