"""Every plugin contract in one place: the protocol each kind of strategy implements.

A plugin *registers* strategies by returning descriptors from a registration hook
(:mod:`ctxfold.kernel.hookspecs`); the kernel *selects* one by the name in config and builds it
with the descriptor's factory, which must return an object satisfying the protocol of its kind
here. How strategies are described, built and tabled (descriptor, factory context, typed
options, the table of kinds) is :mod:`ctxfold.kernel.kinds`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ctxfold.kernel.sessions import ImportedSession, PolicyRequest
from ctxfold.kernel.state import SidecarState
from ctxfold.kernel.types import (
    Appended,
    ChatRequest,
    ChatResponse,
    CheckResult,
    ForkPoint,
    Message,
    PinBlock,
    RequestShape,
    SseEvent,
    SummaryRequest,
    SummaryResult,
    TextStats,
    Usage,
)

# -- estimator ---------------------------------------------------------------------------------


@runtime_checkable
class Estimator(Protocol):
    """Counts the tokens of a whole request shape (design §2.2).

    Implementations must be incremental: per-message counts are cached by fingerprint so
    estimating turn n+1 does not re-tokenize turns 1..n.
    """

    name: str

    def estimate(self, shape: RequestShape) -> int:
        """Return the (calibrated) admission estimate of ``shape`` in tokens."""
        ...

    def calibrate(self, shape: RequestShape, usage: Usage) -> bool:
        """Learn from the provider's prompt tokens for exactly ``shape``; True if accepted."""
        ...

    def reset_calibration(self) -> None:
        """Forget calibration (model change)."""
        ...


@runtime_checkable
class CountingEstimator(Protocol):
    """An estimator whose raw per-message counts can be kept with the session in a
    :class:`CountStore` (the built-in ones), so reopening does not re-tokenize."""

    @property
    def count_key(self) -> str:
        """Names the estimator and its version: a record of another key is never read."""
        ...

    def seed_counts(self, counts: Mapping[str, TextStats]) -> None:
        """Take counts by message fingerprint (from the record) without tokenizing."""
        ...

    def take_new_counts(self) -> dict[str, TextStats]:
        """The counts measured since the last call (to append to the record)."""
        ...


@runtime_checkable
class IncrementalEstimator(Estimator, Protocol):
    """An estimator that exposes raw per-message statistics, so the engine extends the
    previous view's sum by the appended messages only (O(new messages) per turn).

    ``scale(shape_stats(s))`` must equal ``estimate(s)``; ``count_message`` is the calibrated
    count of one message without request overheads (used to size the tail).
    """

    def message_stats(self, message: Message) -> TextStats:
        """Raw statistics of one message (cached; zero for ``local_only`` messages)."""
        ...

    def shape_stats(self, shape: RequestShape) -> TextStats:
        """Raw statistics of a whole request shape, overheads included."""
        ...

    def scale(self, stats: TextStats) -> int:
        """Apply the calibration to raw statistics."""
        ...

    def count_message(self, message: Message) -> int:
        """Calibrated planning count of one message."""
        ...


# -- pruner, summarizer, store, sidecar format ----------------------------------------------


@runtime_checkable
class Pruner(Protocol):
    """Shrinks oversized tool results of a view; returns ``None`` when nothing changed."""

    def prune(self, view: Sequence[Message]) -> tuple[list[Message], int] | None:
        """Return (pruned view, number of tool results pruned) or ``None``."""
        ...


@runtime_checkable
class Summarizer(Protocol):
    """Produces the structured summary of a fold region in exactly one call, never retried."""

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Summarize ``request``; raise a :class:`~ctxfold.CtxfoldError` on failure."""
        ...


@runtime_checkable
class AsyncSummarizer(Summarizer, Protocol):
    """A summarizer that can also be awaited (the engine's async face uses it; a plain
    :class:`Summarizer` runs in a worker thread there)."""

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        """Summarize ``request`` without blocking the event loop."""
        ...


class SummaryCheck(Protocol):
    """A checkpoint's pinned rules and the check of its summary before install; with
    ``second_pass`` a summary that lost facts goes back to the summarizer once."""

    @property
    def second_pass(self) -> bool:
        """Whether a summary that lost facts is sent back to the summarizer once (with the
        losses named) before the check repairs what is still missing."""
        ...

    def pins(self, canonical: Sequence[Message], folded: int, head: Sequence[Message],
             window: int) -> PinBlock | None:
        """The rules pinned by a checkpoint folding ``canonical[:folded]`` after ``head``."""
        ...

    def check(self, region: Sequence[Message], kept: Sequence[Message], text: str,
               window: int, task: Message | None = None) -> CheckResult:
        """Check ``text`` (the summary of the view messages ``region``; ``task``: the full
        task statement) with ``kept`` (the rest of the candidate view); repair its losses."""
        ...


@runtime_checkable
class Store(Protocol):
    """Durable storage of canonical transcripts and sidecars. ``append`` lands a batch whole
    or not at all; ``write_sidecar`` is atomic and ``replace_sidecar`` a compare-and-swap;
    ``revision`` tells a process that another one wrote; session ids are validated before any
    storage location is derived from them (a bad id is a :class:`~ctxfold.SessionError`).
    ``ctxfold.testing.StoreContract`` is the suite every store passes (docs/plugins.md).
    Optional extensions below: :class:`PrefixStore`, :class:`CountStore`,
    :class:`ForkPoints`."""

    def exists(self, session_id: str) -> bool:
        """Whether the session has a transcript (an empty one counts)."""
        ...

    def create(self, session_id: str) -> None:
        """Create an empty session; :class:`~ctxfold.SessionError` if it already exists
        (two processes creating one id: exactly one succeeds)."""
        ...

    def load(self, session_id: str, *, repair: bool = True) -> list[Message]:
        """The canonical transcript. ``repair=False`` (read-only commands) never changes a
        file: a torn tail is left in place and not returned."""
        ...

    def append(self, session_id: str, messages: Sequence[Message]) -> Appended:
        """Append one batch, whole or not at all; the revisions before and after it."""
        ...

    def revision(self, session_id: str) -> str:
        """A token that changes whenever the transcript changes (an append, a rewind); cheap,
        so a process can check before every prepare whether another one wrote."""
        ...

    def read_sidecar(self, session_id: str) -> bytes | None:
        """The sidecar's bytes as last written, ``None`` when there is none; unreadable
        storage is a :class:`~ctxfold.SidecarError`."""
        ...

    def write_sidecar(self, session_id: str, data: bytes) -> None:
        """Replace the sidecar atomically: a reader sees the old bytes or the new, never a
        mix; never leaves a sidecar behind a deleted session."""
        ...

    def replace_sidecar(self, session_id: str, data: bytes, expected: bytes | None) -> bool:
        """Compare-and-swap: write ``data`` only if the stored sidecar is exactly
        ``expected`` (``None``: no sidecar), the check and the write atomic with respect to
        every other writer; ``False`` (nothing written) when it was not."""
        ...

    def discard_sidecar(self, session_id: str, reason: str) -> None:
        """Set an invalid sidecar aside (kept for inspection, not deleted) so the session
        opens without it and rebuilds its view from the transcript; ``reason`` says why."""
        ...

    def last_activity(self, session_id: str) -> float | None:
        """When the transcript last changed (epoch seconds), ``None`` for no session; a
        sidecar write does not count (the prompt-cache TTL is measured from it)."""
        ...

    def list_sessions(self) -> list[str]:
        """The id of every session in the store, sorted."""
        ...

    def fork(self, source_id: str, target_id: str, upto: int | None = None) -> None:
        """Create ``target_id`` holding the first ``upto`` messages of ``source_id`` (all of
        them when ``None``), with the source's sidecar when its checkpoint lies inside them;
        :class:`~ctxfold.SessionError` if ``target_id`` exists. The source is unchanged."""
        ...

    def rewind(self, session_id: str, upto: int) -> None:
        """Keep only the first ``upto`` messages (0 ≤ ``upto`` ≤ length, else a
        :class:`~ctxfold.SessionError` and nothing changes), atomically. A store may also
        take ``keep_as=ID``: publish the whole history as session ``ID`` first, under the same
        lock — the engine uses it when present (:mod:`ctxfold.engine.lineage`)."""
        ...

    def delete(self, session_id: str) -> None:
        """Remove the session and every file or row of it, and nothing of any other session."""
        ...


@runtime_checkable
class PrefixStore(Protocol):
    """The optional store extension for reopening long sessions quickly
    (:mod:`ctxfold.engine.transcript`)."""

    def load_transcript(self, session_id: str) -> Sequence[Message]:
        """The canonical transcript, like ``load``, maybe a :class:`~ctxfold.Transcript`
        whose vouched prefix is not decoded yet."""
        ...

    def vouch_prefix(self, session_id: str, count: int, prefix_hash: str,
                     revision: str) -> None:
        """Remember that the first ``count`` messages, as stored at ``revision``, have
        covered-prefix hash ``prefix_hash`` (a cache: nothing when the transcript is no
        longer at ``revision``; no durability needed)."""
        ...


class LazyLines(Protocol):
    """The stored lines of a transcript prefix, decoded on demand by their store (what a
    :class:`PrefixStore` hands a :class:`~ctxfold.Transcript`)."""

    def __len__(self) -> int:
        """How many stored lines (messages) there are."""
        ...

    def decode(self, index: int) -> Message:
        """Message ``index``; :class:`~ctxfold.StoreError` naming the line if it is bad."""
        ...

    def roles(self) -> Sequence[str]:
        """The role of each message read from its line without decoding it; ``""`` where
        the line does not show it plainly."""
        ...


@runtime_checkable
class CountStore(Protocol):
    """The optional store extension that keeps the token-count record of a session
    (:mod:`ctxfold.engine.counts`)."""

    def read_counts(self, session_id: str, key: str) -> bytes:
        """The record of ``key`` (empty when there is none)."""
        ...

    def append_counts(self, session_id: str, key: str, data: bytes) -> None:
        """Append to the record of ``key`` (no durability needed: it is a cache)."""
        ...


@runtime_checkable
class ForkPoints(Protocol):
    """The optional store extension that records where a session came from: ``fork`` (and
    a rewind's ``keep_as``) record a :class:`~ctxfold.ForkPoint` for the new session."""

    def fork_point(self, session_id: str) -> ForkPoint | None:
        """Where ``session_id`` was forked from; ``None`` for a session that was created."""
        ...


@runtime_checkable
class SidecarCodec(Protocol):
    """Decodes every historic sidecar form it knows; encodes the current one."""

    def decode(self, data: Mapping[str, Any]) -> SidecarState:
        """Decode a sidecar document; :class:`~ctxfold.SidecarError` if invalid,
        :class:`~ctxfold.kernel.errors.SidecarVersionError` if newer than the codec."""
        ...

    def encode(self, state: SidecarState) -> dict[str, Any]:
        """The current-schema JSON document of ``state``."""
        ...


# -- provider ----------------------------------------------------------------------------------


@runtime_checkable
class Provider(Protocol):
    """A model endpoint. Plugins translate; the transport package owns HTTP.

    ``name`` is the provider's registered name, ``context_window`` the model's window in tokens
    and ``cache_ttl_minutes`` how long its prefix cache keeps an idle prefix."""

    name: str
    context_window: int
    cache_ttl_minutes: int

    def complete(self, request: ChatRequest) -> ChatResponse:
        """Send ``request`` and return the assembled response; raise a ProviderError."""
        ...


@runtime_checkable
class AsyncProvider(Provider, Protocol):
    """A provider that can also be awaited (``ContextManager.acomplete`` uses it; a plain
    :class:`Provider` runs in a worker thread there)."""

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        """Send ``request`` without blocking the event loop."""
        ...


@runtime_checkable
class ShowsBody(Protocol):
    """A provider that can show the exact body it would send (``ctxfold_before_request``)."""

    def body(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body ``complete(request)`` would send, byte for byte once serialized."""
        ...


class StreamAssembler(Protocol):
    """Accumulates one streamed response. Raise a ProviderError for in-stream errors."""

    def feed(self, event: SseEvent) -> bool:
        """Consume one event; return True when the stream is complete (stop reading)."""
        ...

    def partial(self) -> Message | None:
        """What has arrived so far as a ``partial=True`` assistant message (None if nothing)."""
        ...

    def finish(self, request_id: str) -> ChatResponse:
        """The complete response after the stream ended; raise ProviderConnectionError if the
        stream ended before its terminal event."""
        ...


@runtime_checkable
class Translator(Protocol):
    """What a provider plugin writes: the request body out, the response in."""

    name: str
    #: Path appended to the base URL, e.g. ``/chat/completions``.
    path: str

    def build_body(self, request: ChatRequest, *, model: str) -> dict[str, Any]:
        """The JSON body for ``request``. Deterministic, messages before anything that varies."""
        ...

    def parse_response(self, data: Any, request_id: str) -> ChatResponse:
        """Parse a non-streaming JSON answer; raise ProviderResponseError when malformed."""
        ...

    def new_stream(self) -> StreamAssembler:
        """A fresh assembler for one streamed response."""
        ...


# -- config migration, importer, policy --------------------------------------------------------


@runtime_checkable
class ConfigMigration(Protocol):
    """Normalises retired keys on load and names them for ``ctxfold config migrate``."""

    #: ``(table, key names)``: the retired keys, e.g. ``("agent", ("soft_compact_ratio", ...))``.
    keys: tuple[str, tuple[str, ...]]

    def normalize(self, raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Return ``raw`` with retired keys zeroed and the dotted names of those found."""
        ...


@runtime_checkable
class Importer(Protocol):
    """Reads one agent system's transcript format. Optional ``priority: int`` orders
    auto-detection (lower first). ``sniff`` is cheap and never raises for other formats;
    ``load`` raises :class:`~ctxfold.kernel.errors.ImporterError` naming file and position."""

    name: str

    def sniff(self, path: Path) -> bool:
        """True when ``path`` looks like this format."""
        ...

    def load(self, path: Path) -> ImportedSession:
        """Read ``path`` into an :class:`~ctxfold.kernel.sessions.ImportedSession`."""
        ...


@runtime_checkable
class Policy(Protocol):
    """A context-maintenance policy under replay."""

    name: str

    def observe(self, message: Message) -> None:
        """Take the next canonical message of the session."""
        ...

    def request(self) -> PolicyRequest:
        """The request to send now; raise PolicyFailedError when nothing fits."""
        ...

    def canonical(self) -> tuple[Message, ...] | None:
        """The canonical transcript the policy keeps, ``None`` if it keeps none of its own."""
        ...
