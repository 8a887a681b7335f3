"""One model turn with context-overflow recovery (design §7.3).

Budget per request: at most one prune, one summary and one retry of the original request.
If the provider's overflow error leaves room for output, the retry clips the output budget;
otherwise one ``prepare(trigger="overflow")`` must advance the projection version before the
single retry. A partial assistant message from a broken stream is never recorded.

:func:`turn` is a generator, so the sync and async faces of the engine share this logic: it
yields :class:`Send` (and is sent the :class:`~ctxfold.kernel.types.ChatResponse`, or has the
:class:`~ctxfold.ContextLimitError` thrown in), :class:`Prepare` (sent the prepared request, or
has the :class:`~ctxfold.CompactionRequiredError` thrown in) and :class:`Learn` (nothing sent
back), and returns the response to append; the engine's one
driver (:mod:`ctxfold.engine.driving`) performs the steps.

An overflow error without numbers (OpenAI's ``context_length_exceeded``) proves only that the
window is below the request. Every request ctxfold sends fills its window (prompt + output
budget: the summary request is ``window − summary cap − 256`` plus the cap, a retry gets the
room left), so assuming the window *is* the rejected request's estimate makes the summary
request and the retry overflow too. The window is assumed to be
:data:`UNKNOWN_WINDOW_FRACTION` of it instead: the largest fraction for which one overflow
checkpoint still folds the view below the assumed window's hard ceiling. Recovery therefore
works for a real window down to about ⅔ of the rejected request; below that one summary
cannot fold enough, and the error says which window was assumed.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, ClassVar

import attrs

from ctxfold.engine.prepared import PreparedRequest
from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import Estimator, Provider, ShowsBody
from ctxfold.kernel.errors import CompactionRequiredError, ContextLimitError, CtxfoldError
from ctxfold.kernel.maintenance import PROTOCOL_RESERVE, TAIL_RATIO
from ctxfold.kernel.types import ChatRequest, ChatResponse, Message, RequestShape, Trigger, Usage

#: Output room that must remain for a clip-and-retry to make sense (design §7.3).
OUTPUT_RESERVE = 8192
#: The window assumed after an overflow error without numbers, as a fraction of the smaller of
#: the rejected request's estimate and the effective window (so repeated overflows shrink it
#: geometrically); never below :data:`MIN_ASSUMED_WINDOW` tokens.
UNKNOWN_WINDOW_FRACTION = 2 / 3
MIN_ASSUMED_WINDOW = 1024
#: No model has a smaller window: a prompt below it cannot have overflowed one by itself, so
#: an overflow without numbers is blamed on the output it reserved.
SMALLEST_WINDOW = 4096


@attrs.frozen
class Send:
    """Send ``request`` to the provider (its overflow error is thrown in)."""

    thrown: ClassVar[tuple[type[CtxfoldError], ...]] = (ContextLimitError,)
    request: ChatRequest


@attrs.frozen
class Prepare:
    """Run ``prepare(trigger)`` and send back the prepared request (a
    :class:`CompactionRequiredError` is thrown in)."""

    thrown: ClassVar[tuple[type[CtxfoldError], ...]] = (CompactionRequiredError,)
    trigger: Trigger


@attrs.frozen
class Learn:
    """The provider's overflow error taught something: the effective window is at most
    ``window`` (0: unchanged); calibrate from ``prompt_tokens`` for ``request`` (0: none)."""

    thrown: ClassVar[tuple[type[CtxfoldError], ...]] = ()
    window: int
    prompt_tokens: int
    request: ChatRequest


@attrs.frozen
class TurnContext:
    """What a turn starts from. ``window`` reads the effective window now (it shrinks when
    an overflow teaches one); ``estimate`` is the admission estimate of a message list."""

    session_id: str
    model: str
    max_output_tokens: int
    effort: str
    cache_key: str
    window: Callable[[], int]
    estimate: Callable[[Sequence[Message]], int]

    @classmethod
    def of(cls, session_id: str, config: Config, cache_key: str, max_output_tokens: int | None,
           *, window: Callable[[], int], estimate: Callable[[Sequence[Message]], int]
           ) -> TurnContext:
        """A session's turn: ``[agent]`` settings, unless ``max_output_tokens`` is given."""
        agent = config.agent
        return cls(session_id=session_id, model=config.provider.model,
                   max_output_tokens=agent.max_output_tokens if max_output_tokens is None
                   else max_output_tokens, effort=agent.effort, cache_key=cache_key,
                   window=window, estimate=estimate)


def room(window: int, prompt_tokens: int) -> int:
    """Output room the window leaves after the prompt and the protocol reserve (≥ 1)."""
    return max(1, window - prompt_tokens - PROTOCOL_RESERVE)


TurnStep = Send | Prepare | Learn
TurnSteps = Generator[TurnStep, object, ChatResponse]


def turn(ctx: TurnContext) -> TurnSteps:
    """Prepare, send, recover from one overflow; return the response to append."""
    prepared = yield Prepare("pressure")
    assert isinstance(prepared, PreparedRequest)
    request = ChatRequest(
        messages=prepared.messages,
        tools=prepared.tools,
        model=ctx.model,
        max_output_tokens=ctx.max_output_tokens,
        effort=ctx.effort,
        cache_key=ctx.cache_key,
        output_room=room(ctx.window(), prepared.tokens),
    )
    retried = False
    while True:
        try:
            response = yield Send(request)
        except ContextLimitError as exc:
            unknown = exc.window <= 0 and exc.prompt <= 0  # the error gave no numbers
            if retried:
                raise CompactionRequiredError(
                    f"session {ctx.session_id!r}: the provider still reports a context overflow "
                    f"after one recovery retry ({exc}){_assumed(ctx, unknown)}"
                ) from exc
            retried = True
            yield Learn(window=learned_window(ctx, request, exc), prompt_tokens=exc.prompt,
                        request=request)
            left = output_left(ctx, request, exc)
            if left > 0:
                request = attrs.evolve(request, max_output_tokens=left)
                continue
            version = prepared.projection_version
            try:
                prepared = yield Prepare("overflow")
            except CompactionRequiredError as failed:  # e.g. its summary request overflowed too
                raise CompactionRequiredError(f"{failed}{_assumed(ctx, unknown)}") from failed
            assert isinstance(prepared, PreparedRequest)
            if prepared.projection_version <= version:
                raise CompactionRequiredError(
                    f"session {ctx.session_id!r}: context overflow ({exc}) and the overflow "
                    f"checkpoint did not advance the projection; nothing was retried"
                    f"{_assumed(ctx, unknown)}"
                ) from exc
            request = attrs.evolve(request, messages=prepared.messages,
                                   output_room=room(ctx.window(), prepared.tokens))
            continue
        assert isinstance(response, ChatResponse)
        return response


def output_left(ctx: TurnContext, request: ChatRequest, exc: ContextLimitError) -> int:
    """The output budget of a clip-and-retry (0: fold instead). With room to spare beyond
    :data:`OUTPUT_RESERVE`, the output is clipped to it. A prompt no larger than the tail a
    checkpoint keeps verbatim (5 % of the window) leaves nothing a checkpoint could fold:
    the output reservation overflowed, so the output gets what the window leaves after it."""
    window = exc.window or ctx.window()
    prompt = exc.prompt or ctx.estimate(request.messages)
    if exc.prompt and window - prompt - OUTPUT_RESERVE > 0:
        return window - prompt - OUTPUT_RESERVE
    if prompt <= window * TAIL_RATIO:
        return max(0, window - prompt - PROTOCOL_RESERVE)
    return 0


def assumed_window(tokens: int) -> int:
    """The window assumed below a rejected request of ``tokens`` without numbers."""
    return max(min(tokens, MIN_ASSUMED_WINDOW), int(tokens * UNKNOWN_WINDOW_FRACTION))


def learned_window(ctx: TurnContext, request: ChatRequest, exc: ContextLimitError) -> int:
    """The window an overflow error proves (0 when it proves nothing new).

    A body without numbers (OpenAI's ``context_length_exceeded``) still proves that the
    window is below this request: the window is assumed to be
    :data:`UNKNOWN_WINDOW_FRACTION` of the request's estimate (or of the effective window,
    when smaller), so the overflow checkpoint's summary request and the retry — each filling
    the assumed window with prompt and output budget — fit a real window below the request.
    """
    if exc.window > 0:
        return exc.window
    if exc.prompt <= 0:
        prompt = ctx.estimate(request.messages)
        if prompt < SMALLEST_WINDOW:  # no model's window is that small: the output overflowed
            prompt += request.max_output_tokens or request.output_room or 0
        return assumed_window(min(prompt, ctx.window()))
    return 0


def _assumed(ctx: TurnContext, unknown: bool) -> str:
    if not unknown:
        return ""
    return (f"; the provider's error gave no token counts, so the window was assumed to be "
            f"{ctx.window()} tokens ({UNKNOWN_WINDOW_FRACTION:.0%} of the rejected request): "
            "set [provider] context_window to the model's real window")


def learn(step: Learn, learned_window: int | None, estimator: Estimator) -> int | None:
    """The learned window after ``step`` (effective = min(configured, learned)); the
    estimator is calibrated from the prompt tokens the error reported."""
    if step.prompt_tokens > 0:
        shape = RequestShape(list(step.request.messages), step.request.tools)
        estimator.calibrate(shape, Usage(prompt_tokens=step.prompt_tokens))
    if step.window > 0:
        return min(learned_window or step.window, step.window)
    return learned_window


def before_request(hooks: Any, session_id: str, provider: Provider, request: ChatRequest
                   ) -> None:
    """Call the ``ctxfold_before_request`` observers with the body about to be sent."""
    body = provider.body(request) if isinstance(provider, ShowsBody) else {
        "messages": request.messages}
    hooks.ctxfold_before_request(session_id=session_id, request=body)
