"""One model turn with context-overflow recovery (SPEC §3.6, origin §3.10).

Budget per request: at most one prune, one summary and one retry of the original request.
If the provider's overflow error leaves room for output, the retry clips the output budget;
otherwise one ``prepare(trigger="overflow")`` must advance the projection version before the
single retry. A partial assistant message from a broken stream is never recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ctxfold.kernel.errors import CompactionRequiredError, ContextLimitError
from ctxfold.kernel.fold import PROTOCOL_RESERVE
from ctxfold.kernel.strategies import ChatRequest, ChatResponse, Provider
from ctxfold.kernel.types import RequestShape, Usage

if TYPE_CHECKING:
    from ctxfold.kernel.engine import ContextManager

#: Output room that must remain for a clip-and-retry to make sense (origin §3.10).
OUTPUT_RESERVE = 8192


def complete_with_recovery(
    cm: ContextManager, provider: Provider, *, max_output_tokens: int | None = None
) -> ChatResponse:
    """Prepare, send, recover from one overflow, append the reply and observe its usage."""
    prepared = cm.prepare("pressure")
    cap = cm.config.agent.max_output_tokens if max_output_tokens is None else max_output_tokens
    request = ChatRequest(
        messages=prepared.messages,
        tools=prepared.tools,
        model=cm.config.provider.model,
        max_output_tokens=cap,
        effort=cm.config.agent.effort,
        cache_key=cm.state.prompt_cache_key,
        output_room=_room(cm, prepared.tokens),
    )
    retried = False
    hooks = cm.committer.hooks
    while True:
        if hooks is not None:
            body_of = getattr(provider, "body", None)
            body = body_of(request) if callable(body_of) else {"messages": request.messages}
            hooks.ctxfold_before_request(session_id=cm.session_id, request=body)
        try:
            response = provider.complete(request)
            break
        except ContextLimitError as exc:
            if retried:
                raise CompactionRequiredError(
                    f"session {cm.session_id!r}: the provider still reports a context overflow "
                    f"after one recovery retry ({exc})"
                ) from exc
            retried = True
            _learn(cm, request, exc)
            room = (exc.window or cm.window) - exc.prompt - OUTPUT_RESERVE if exc.prompt else 0
            if room > 0:
                request = attrs.evolve(request, max_output_tokens=room)
                continue
            version = prepared.projection_version
            prepared = cm.prepare("overflow")
            if prepared.projection_version <= version:
                raise CompactionRequiredError(
                    f"session {cm.session_id!r}: context overflow ({exc}) and the overflow "
                    "checkpoint did not advance the projection; nothing was retried"
                ) from exc
            request = attrs.evolve(
                request, messages=prepared.messages, output_room=_room(cm, prepared.tokens)
            )
    cm.append(response.message)
    cm.observe_usage(response.usage)
    return response


def _room(cm: ContextManager, prompt_tokens: int) -> int:
    """Output room the window leaves after the prompt and the protocol reserve (≥ 1)."""
    return max(1, cm.window - prompt_tokens - PROTOCOL_RESERVE)


def _learn(cm: ContextManager, request: ChatRequest, exc: ContextLimitError) -> None:
    """Learn the window (effective = min(configured, learned)) and calibrate from the error.

    A body without numbers (OpenAI's ``context_length_exceeded``) still proves that the
    window is below this request: the request's own estimate becomes the learned window, so
    the overflow checkpoint folds below it instead of finding nothing to do.
    """
    window = exc.window
    if window <= 0 and exc.prompt <= 0:
        window = cm.estimate(request.messages)
    if window > 0:
        cm.learned_window = min(cm.learned_window or window, window)
    if exc.prompt > 0:
        shape = RequestShape(list(request.messages), request.tools)
        cm.estimator.calibrate(shape, Usage(prompt_tokens=exc.prompt))
