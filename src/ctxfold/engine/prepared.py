"""What the ContextManager's methods return: the request to send, a resume label, a usage
observation."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Protocol

import attrs

from ctxfold.interop.chat import tool_schema_to_openai
from ctxfold.interop.parts import chat_messages
from ctxfold.interop.responses import input_items, tool_item
from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import Estimator
from ctxfold.kernel.kinds import ProviderDefaults
from ctxfold.kernel.maintenance import PROTOCOL_RESERVE, Outcome
from ctxfold.kernel.state import Action, CacheState, Projection, label_cache
from ctxfold.kernel.types import (
    MIN_CALIBRATION_TOKENS,
    TEXT_PART_TYPES,
    Message,
    RequestShape,
    ToolSchema,
    Usage,
    parse_time,
)


@attrs.frozen
class PreparedRequest:
    """The provider-visible messages and tools of the next request, and what maintenance did.

    ``tokens`` is the admission estimate of the request, ``trigger_tokens`` the trigger it
    was compared with. ``action`` is what this ``prepare()`` did: ``none``, the last install
    (``prune``/``summary``), or ``blocked``/``failed``/``noop`` (a receipt, no install).

    ``offers_capability`` is true when the view holds something the model can look up — a
    checkpoint or pruned tool results (a projection), or a bounded tool result — and only
    then; ``tools`` then ends with ``use_capability`` (:data:`ctxfold.USE_CAPABILITY_TOOL`),
    which the host answers with ``cm.answer(call)``. ``max_output_tokens`` is the output
    budget the wire forms carry (``None``: the provider's own default), in the chat field
    ``output_field`` (``to_openai``) or ``max_output_tokens`` (``to_responses``).
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...]
    tokens: int
    projection_version: int
    trigger_tokens: int
    summary_calls: int = 0
    action: Action = Action.NONE
    #: Whether this prepare() installed a prune (possibly followed by a summary).
    pruned: bool = False
    offers_capability: bool = False
    max_output_tokens: int | None = None
    output_field: str = "max_completion_tokens"

    @classmethod
    def of(cls, outcome: Outcome, tools: tuple[ToolSchema, ...], projection: Projection | None,
           trigger_tokens: int, **wire: Any) -> PreparedRequest:
        """The request a maintenance run's ``outcome`` leaves to send (``wire``: the
        capability offer and the output budget)."""
        return cls(
            messages=tuple(outcome.view), tools=tools, tokens=outcome.tokens,
            projection_version=projection.projection_version if projection else 0,
            trigger_tokens=trigger_tokens, summary_calls=outcome.summary_calls,
            action=outcome.action, pruned=outcome.pruned, **wire,
        )

    def to_openai(self) -> dict[str, Any]:
        """:func:`to_openai` of this request."""
        return to_openai(self)

    def to_responses(self) -> dict[str, Any]:
        """:func:`to_responses` of this request."""
        return to_responses(self)


class _HasMessagesAndTools(Protocol):
    @property
    def messages(self) -> Sequence[Message]: ...
    @property
    def tools(self) -> Sequence[ToolSchema]: ...


def to_openai(request: _HasMessagesAndTools) -> dict[str, Any]:
    """The chat-completions ``messages`` (and ``tools`` when there are any) of a
    :class:`PreparedRequest` or a :class:`~ctxfold.SummaryRequest`, ready to send with the
    OpenAI SDK: ``client.chat.completions.create(model=..., **ctxfold.to_openai(p))``.
    Only provider-visible fields; content parts exactly as the host gave them (those of
    appended Responses items in their chat form; see :func:`to_openai_messages`). A prepared
    request's tools include ``use_capability`` when it offers it, and its output budget goes
    in the provider's chat field (``max_tokens`` for DeepSeek, ``max_completion_tokens``
    otherwise) when the window needs one."""
    payload: dict[str, Any] = {"messages": to_openai_messages(request.messages)}
    if request.tools:
        payload["tools"] = [tool_schema_to_openai(t) for t in request.tools]
    if isinstance(request, PreparedRequest) and request.max_output_tokens is not None:
        payload[request.output_field] = request.max_output_tokens
    return payload


def to_responses(request: _HasMessagesAndTools) -> dict[str, Any]:
    """The Responses ``input`` (and ``tools``) of a :class:`PreparedRequest` or a
    :class:`~ctxfold.SummaryRequest`: ``client.responses.create(model=...,
    **ctxfold.to_responses(p))``; a prepared request's output budget as
    ``max_output_tokens`` when the window needs one. A part type Responses cannot carry is a
    MessageError."""
    payload: dict[str, Any] = {"input": input_items(request.messages)}
    if request.tools:
        payload["tools"] = [tool_item(t) for t in request.tools]
    if isinstance(request, PreparedRequest) and request.max_output_tokens is not None:
        payload["max_output_tokens"] = request.max_output_tokens
    return payload


#: The share of the prompt estimate the wire forms' output budget leaves unused. A host that
#: sends ``to_openai()`` cannot retry an overflow the way ``complete()`` does, and early in a
#: session the estimate can be a fifth low (calibrated from a first request of a few hundred
#: tokens, mostly template overhead: 2,788 estimated, 3,301 counted, in the README's session).
ESTIMATE_MARGIN = 0.25


def wire_fields(config: Config, window: int, tokens: int, defaults: ProviderDefaults, *,
                offers: bool) -> dict[str, Any]:
    """What :meth:`PreparedRequest.of` takes besides the outcome: the capability offer and
    the output budget of a request of ``tokens`` in ``window``, in the provider's field."""
    margin = math.ceil(tokens * ESTIMATE_MARGIN)
    room = max(1, window - tokens - PROTOCOL_RESERVE - margin)
    budget = wire_budget(config.agent.max_output_tokens, config.agent.effort, room, defaults,
                         model=config.provider.model)
    return {"offers_capability": offers, "max_output_tokens": budget,
            "output_field": defaults.output_field}


def wire_budget(max_output_tokens: int, effort: str, room: int, defaults: ProviderDefaults,
                *, model: str = "") -> int | None:
    """The output budget the wire forms carry for a request that leaves ``room`` tokens of
    the window after its prompt: ``[agent] max_output_tokens`` when set (clipped to the
    room); else the room when it is smaller than what the provider reserves for output by
    default (its declared budget for the effort within what ``model`` accepts:
    :meth:`ProviderDefaults.auto_budget`; DeepSeek's 64K in thinking mode), so that
    reservation cannot overflow a small window — the rule ``complete()`` applies; else
    ``None``, the provider's own default."""
    if max_output_tokens > 0:
        return min(max_output_tokens, room) if room > 0 else max_output_tokens
    auto = defaults.auto_budget(effort, model)
    return room if 0 < room < auto else None


def to_openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Provider-visible chat dicts of ``messages`` (``local_only`` ones skipped): content
    parts as the host gave them, those of Responses items in their chat form; a part type no
    OpenAI format knows, or a Responses item with no chat form, is a
    :class:`~ctxfold.MessageError` naming it."""
    return chat_messages(messages, as_given=True)


COLD_RESUME_NOTICE = "history kept; compaction deferred until context pressure"


@attrs.frozen
class UsageObservation:
    """What ``observe_usage`` did: ``calibrated`` (also its truth value) and why."""

    calibrated: bool
    reason: str

    def __bool__(self) -> bool:
        return self.calibrated


def calibrate(estimator: Estimator, shape: RequestShape | None, usage: Usage
              ) -> UsageObservation:
    """Calibrate ``estimator`` from the ``usage`` of the request of ``shape``."""
    if shape is None:
        return UsageObservation(False, "recorded; no request was prepared yet, so there is "
                                       "nothing to calibrate against")
    if estimator.calibrate(shape, usage):
        return UsageObservation(True, "recorded and calibrated")
    return UsageObservation(False, calibration_refusal(usage, shape))


def calibration_refusal(usage: Usage, shape: RequestShape | None = None) -> str:
    """Why an estimator declined to calibrate from ``usage`` (design §2.3): the rule of the
    built-in estimators that applied, when one can be told from ``shape``."""
    if usage.estimated or usage.aggregated:
        return "recorded; not calibrated: the counts are estimated or summed over requests"
    if usage.prompt_tokens < MIN_CALIBRATION_TOKENS:
        return (f"recorded; not calibrated: {usage.prompt_tokens} prompt tokens is under "
                f"{MIN_CALIBRATION_TOKENS} (template overheads dominate so small a request)")
    if shape is not None and any(
            json.loads(raw).get("type") not in TEXT_PART_TYPES
            for m in shape.messages for raw in m.parts):
        return ("recorded; not calibrated: the request has image, audio or file parts, which "
                "the provider counts by its own rule")
    return (f"recorded; not calibrated: {usage.prompt_tokens} prompt tokens do not fit the "
            "prepared request (outside 0.05–2 tokens per character: they belong to another "
            "request), or the estimator declined them")


@attrs.frozen
class ResumeResult:
    """The cache-state label of a resumed session (design §6.3)."""

    cache_state: CacheState
    idle_seconds: float | None
    notice: str = ""


def resume_label(last: float | None, canonical: Sequence[Message], now: float,
                 ttl_minutes: int) -> ResumeResult:
    """Label a resume from the store's last activity (else the last message's time)."""
    if last is None and canonical:
        stamp = parse_time(canonical[-1].created_at)
        last = stamp.timestamp() if stamp else None
    label, idle = label_cache(last, now, ttl_minutes)
    notice = COLD_RESUME_NOTICE if label is CacheState.COLD else ""
    return ResumeResult(cache_state=label, idle_seconds=idle, notice=notice)
