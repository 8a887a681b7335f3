"""Value objects of ctxfold: messages and the requests and answers the contracts exchange.

Every type here is an ``attrs`` frozen class that knows nothing about JSON; all
(un)structuring lives in :mod:`ctxfold.kernel.codec`. Names follow the glossary of
``docs/architecture.md``: a :class:`Message` belongs to the canonical transcript; a
:class:`RequestShape` is what an estimator counts; :class:`ChatRequest`/:class:`ChatResponse`
cross the provider contract and :class:`SummaryRequest`/:class:`SummaryResult` the summarizer
contract. The session's persisted state (projection, receipts, telemetry) is in
:mod:`ctxfold.kernel.state`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import attrs

Role = Literal["system", "user", "assistant", "tool"]
Origin = Literal["user", "host"]
#: Why maintenance ran: ``pressure`` (the automatic trigger), ``manual`` (``compact()``),
#: ``overflow`` (the provider rejected the request as too long). A receipt's ``trigger`` is a
#: plain string, so the labels of older writers (``tool``) still load.
Trigger = Literal["pressure", "manual", "overflow"]


def utc_now() -> str:
    """Return the current time as an ISO-8601 UTC string (the format of every timestamp)."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def utc_time(seconds: float) -> str:
    """``seconds`` since the epoch (a session's clock) in the format of :func:`utc_now`."""
    return (datetime.fromtimestamp(seconds, UTC).isoformat(timespec="microseconds")
            .replace("+00:00", "Z"))


def parse_time(value: str) -> datetime | None:
    """Parse an ISO-8601 timestamp written by :func:`utc_now`; ``None`` when empty/invalid."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@attrs.frozen
class ToolCall:
    """One function call requested by an assistant message (``arguments`` is a JSON string)."""

    id: str
    name: str
    arguments: str = ""


#: The part types whose ``text`` is the message's text (chat and Responses forms).
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
#: The smallest provider prompt the built-in estimators calibrate from (design §2.3: template
#: overheads dominate below it); the engine names it when it explains a refusal.
MIN_CALIBRATION_TOKENS = 256


@attrs.frozen
class Message:
    """One canonical transcript message.

    ``content`` is the provider-visible text. For tool results it is bounded at creation
    (≤ 32 KiB) and ``raw_content`` holds the complete text, which is never sent to a
    provider and never enters a fingerprint. ``local_only`` messages are displayed but never
    sent. ``origin`` tells whether the user or the host (ctxfold itself) wrote it.
    ``partial`` marks an assistant message whose stream was cut off.

    What an OpenAI-format message carries beyond that is kept as the host gave it, so it is
    sent back unchanged: ``parts`` is content given as a list of parts (text, images, audio,
    files; chat or Responses forms), each the exact JSON of one part (``content`` is then
    empty); ``extra`` is a JSON object of fields ctxfold has no name for, in the order given;
    ``wire_role`` is the role as the host wrote it when it is an alias (``developer`` for
    ``system``); ``content_form`` records a ``null`` or absent ``content`` (empty: a string).
    ``responses_items`` keeps the OpenAI Responses items a message was built from, in order,
    each the exact JSON of the item with the fields ctxfold models (role, content, call id,
    name, arguments, output) set to ``null``: item ids, statuses, annotations and whole
    reasoning items go back out as they came. ``anthropic_blocks`` does the same for a
    message built from an Anthropic Messages message (:mod:`ctxfold.interop.anthropic`): the
    content blocks it took, in order, each the exact JSON of the block with the fields the
    message models (text, tool call id/name/input, tool result id/content, one thinking text)
    set to ``null`` — thinking signatures, ``redacted_thinking``, ``cache_control``,
    ``is_error``, citations and server-tool blocks go back out as they came. A first entry
    without a ``type`` is the Anthropic message itself (role and content nulled): the
    message opened a new Anthropic message rather than continuing the previous one.
    """

    role: Role
    content: str = ""
    raw_content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning_content: str | None = None
    origin: Origin = "user"
    local_only: bool = False
    partial: bool = False
    created_at: str = ""
    id: str = ""
    parts: tuple[str, ...] = ()
    extra: str = ""
    wire_role: str = ""
    content_form: Literal["", "null", "absent"] = ""
    responses_items: tuple[str, ...] = ()
    anthropic_blocks: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The message's text: ``content``, or the text of its text parts, newline-joined
        (what summarizers and pruners read; the parts themselves are what is sent)."""
        if not self.parts:
            return self.content
        texts = []
        for raw in self.parts:
            part = json.loads(raw)
            if part.get("type") in TEXT_PART_TYPES and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return "\n".join(texts)


@attrs.frozen
class Usage:
    """Token usage reported by a provider for one request.

    ``aggregated`` marks counts summed over retries or several requests; such counts never
    calibrate an estimator (origin bug #7930). ``estimated`` marks counts that a provider did
    not report but ctxfold guessed. ``cache_write_tokens`` are the prompt tokens written to a
    provider's cache by this request (part of ``cache_miss_tokens``), for providers that
    bill writes (Anthropic's ``cache_creation_input_tokens``).
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_hit_tokens: int = 0
    cache_miss_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0
    estimated: bool = False
    aggregated: bool = False


@attrs.frozen
class ToolSchema:
    """One function tool offered to the model (OpenAI function-schema fields); ``extra`` is
    a JSON object of the function's other fields (``strict``, ...), sent back as given.
    ``fields`` is the function object's keys in the host's order (empty: ``name``,
    ``description``, ``parameters``), so a tool dict goes back out exactly as it came in."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = attrs.field(factory=dict)
    extra: str = ""
    fields: tuple[str, ...] = ()


@attrs.frozen
class Appended:
    """What a store's ``append`` reports: the transcript's revision just before the batch was
    written and just after, both taken while the writer holds the session. A ``before`` that
    differs from the revision the writer last saw means another writer came in between."""

    before: str
    after: str
    replayed: bool = False  #: already stored by an earlier attempt: re-read, do not extend


@attrs.frozen
class RequestShape:
    """What an estimator counts: the provider-visible messages plus the tool schemas."""

    messages: Sequence[Message]
    tools: Sequence[ToolSchema] = ()


@attrs.frozen
class TextStats:
    """Raw tokens, characters and CJK characters of one message, tool schema or request
    (what an incremental estimator adds up before it applies its calibration)."""

    tokens: int = 0
    chars: int = 0
    cjk: int = 0

    def __add__(self, other: TextStats) -> TextStats:
        return TextStats(self.tokens + other.tokens, self.chars + other.chars,
                         self.cjk + other.cjk)


# -- what crosses the summarizer contract ------------------------------------------------------


@attrs.frozen
class SummaryRequest:
    """A summary request in the cache-aligned shape of design §4.4."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...]
    max_tokens: int
    focus: str | None = None
    #: The session's ``prompt_cache_key``, so the summary shares the normal requests' cache.
    cache_key: str = ""
    #: The briefing length asked for, in tokens (0: as long as needed, up to ``max_tokens``).
    #: The instruction asks a model for it in words; the extractive summarizer writes to it.
    target_tokens: int = 0


@attrs.frozen
class SummaryResult:
    """What a summarizer returns: the briefing text and why it stopped."""

    text: str
    finish_reason: str = "stop"
    usage: Usage | None = None


@attrs.frozen
class PinBlock:
    """The standing rules a checkpoint carries verbatim right after the task statement:
    the ``message`` placed there and each rule's exact text (``rules``), which a candidate
    view must carry to be installed."""

    message: Message
    rules: tuple[str, ...]


@attrs.frozen
class CheckResult:
    """A summary checked against the probes of its fold region before install: the
    ``text`` to install (repaired), the weighted share of critical probes the candidate
    carried ``before`` and ``after`` the repair (``None``: nothing to check), the facts
    appended verbatim (``repaired``) and those the summary lost (``lost``, before repair)."""

    text: str
    before: float | None = None
    after: float | None = None
    repaired: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()


# -- what crosses the provider contract --------------------------------------------------------


@attrs.frozen
class ChatRequest:
    """A provider-independent model request.

    ``max_output_tokens`` 0 means provider auto (the provider's declared output budget).
    ``effort`` is the reasoning depth (``none``/``low``/``medium``/``high``/``max``).
    ``cache_key`` is the session's ``prompt_cache_key`` (design §6.2). ``output_room`` is what
    the shared context window leaves for output after the prompt (0 = unknown): translators
    clip every output budget to it.
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...] = ()
    model: str = ""
    max_output_tokens: int = 0
    effort: str = "high"
    stream: bool = True
    cache_key: str = ""
    output_room: int = 0
    #: Transport retries for this request (``None``: the provider's setting). Summary
    #: requests use 0: exactly one call, no retry (design §4.4).
    max_retries: int | None = None


@attrs.frozen
class ChatResponse:
    """The assembled answer of one request."""

    message: Message
    finish_reason: str = "stop"
    usage: Usage = attrs.field(factory=Usage)
    request_id: str = ""
    #: The stop sequence that ended the answer (``finish_reason`` is then ``"stop"``), as
    #: Anthropic reports it (``stop_sequence``, https://docs.anthropic.com/en/api/messages);
    #: ``""`` when the provider said a stop sequence ended it but not which, ``None`` when
    #: none did or the provider does not tell.
    stop_sequence: str | None = None


@attrs.frozen
class SseEvent:
    """One server-sent event of a streamed response (comments and keep-alives never reach
    a translator)."""

    event: str
    data: str


@attrs.frozen
class ForkPoint:
    """Where a session came from: it began as the first ``at`` messages of session
    ``parent``. ``reason`` is ``"fork"`` (an explicit fork, or a proxy's branch) or
    ``"rewind"`` (the session keeps the history a rewind of ``parent`` to ``at`` messages
    set aside). Recorded by the store when it creates the session, never changed after."""

    parent: str
    at: int
    reason: str = "fork"
    created_at: str = ""
