"""The ContextManager: the public face of ctxfold's maintenance engine (SPEC §1–§3).

One ``ContextManager`` owns one session: the canonical transcript (append-only, kept
forever), the sidecar state (projection, receipts, telemetry) and the strategies the registry
selected (estimator, pruner, summarizer, store, sidecar codec). ``prepare()`` is the only
automatic maintenance; everything else only reads, appends, or records statistics.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ctxfold.kernel import fold as folding
from ctxfold.kernel.commit import Capture, Committer
from ctxfold.kernel.errors import SessionError
from ctxfold.kernel.fingerprint import fingerprint
from ctxfold.kernel.strategies import Estimator, Pruner, Store, Summarizer
from ctxfold.kernel.types import (
    CacheState,
    Message,
    RequestShape,
    SidecarState,
    ToolSchema,
    Usage,
    parse_time,
    utc_now,
)

if TYPE_CHECKING:
    from ctxfold.config.schema import Config
    from ctxfold.kernel.registry import Registry
    from ctxfold.kernel.strategies import ChatResponse, Provider

PrepareTrigger = Literal["pressure", "manual", "overflow"]
COLD_RESUME_NOTICE = "history kept; compaction deferred until context pressure"


@attrs.frozen
class PreparedRequest:
    """What ``prepare()`` returns: the provider-visible messages and their admission estimate."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...]
    tokens: int
    projection_version: int
    trigger_tokens: int
    summary_calls: int = 0
    #: ``none`` (nothing done), ``prune``/``summary`` (the last install), or
    #: ``blocked``/``failed`` (an attempt left a receipt but installed nothing).
    action: str = "none"
    #: Whether this prepare() installed a prune (possibly followed by a summary).
    pruned: bool = False


@attrs.frozen
class ResumeResult:
    """The cache-state label of a resumed session (SPEC §3.8)."""

    cache_state: CacheState
    idle_seconds: float | None
    notice: str = ""


@attrs.define
class _Progress:
    """Runtime-only latches (never persisted): stuck latch and per-turn guards."""

    stuck_hash: str = ""
    failed_turn: int = -1
    summary_turn: int = -1

    def clear(self) -> None:
        self.stuck_hash = ""
        self.failed_turn = -1


class ContextManager:
    """Maintains one session's context. Build it with :meth:`open`."""

    def __init__(
        self,
        session_id: str,
        *,
        store: Store,
        estimator: Estimator,
        pruner: Pruner,
        summarizer: Summarizer,
        committer: Committer,
        canonical: list[Message],
        config: Config,
        tools: Sequence[ToolSchema] = (),
        window: int | None = None,
        cache_ttl_minutes: int = 1440,
        clock: Callable[[], float] = time.time,
        notices: Sequence[str] = (),
    ) -> None:
        self.session_id = session_id
        self.store = store
        self.estimator = estimator
        self.pruner = pruner
        self.summarizer = summarizer
        self.config = config
        self.tools: tuple[ToolSchema, ...] = tuple(tools)
        self.configured_window = window or config.provider.context_window
        self.learned_window: int | None = None
        self.cache_ttl_minutes = cache_ttl_minutes
        self.clock = clock
        self.notices: list[str] = list(notices)
        self._canonical = canonical
        self._committer = committer
        self._progress = _Progress()
        self._lock = threading.RLock()
        # A turn is one model request: it ends when the assistant's answer is appended.
        self._turn = sum(1 for m in canonical if m.role == "assistant")
        self._last_shape: RequestShape | None = None
        self._view_cache: tuple[Any, ...] | None = None
        self.last_usage: Usage | None = None
        self.summary_calls = 0

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        session_id: str,
        *,
        config: Config | None = None,
        registry: Registry | None = None,
        tools: Sequence[ToolSchema] = (),
        create: bool = True,
        store_path: str | None = None,
        options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> ContextManager:
        """Open (or create) a session with the strategies named in ``config``."""
        from ctxfold.kernel.session import open_manager

        return open_manager(
            cls,
            session_id,
            config=config,
            registry=registry,
            tools=tools,
            create=create,
            store_path=store_path,
            options=options or {},
            **kwargs,
        )

    # -- reading -----------------------------------------------------------------------------

    @property
    def canonical(self) -> tuple[Message, ...]:
        """The canonical transcript (read-only copy)."""
        return tuple(self._canonical)

    @property
    def state(self) -> SidecarState:
        """The current sidecar state."""
        return self._committer.state

    @property
    def window(self) -> int:
        """Effective context window: min(configured, learned from an overflow error)."""
        if self.learned_window:
            return min(self.configured_window, self.learned_window)
        return self.configured_window

    @property
    def trigger_tokens(self) -> int:
        """``floor(window × compact_ratio)``: the one automatic trigger."""
        return math.floor(self.window * self.config.agent.compact_ratio)

    @property
    def hard_ceiling(self) -> int:
        return self.window - folding.PROTOCOL_RESERVE

    def view(self) -> list[Message]:
        """Provider-visible messages: projection body + canonical tail, else canonical."""
        return folding.visible_view(self.state.projection, self._canonical)

    def view_estimate(self) -> tuple[list[Message], int]:
        """The current view and its admission estimate, computed incrementally.

        Between installs the view only grows by appended canonical messages, so with an
        estimator that exposes per-message statistics (``IncrementalEstimator``) the sum of
        the previous view is extended by the new messages only: O(new messages) per turn
        (SPEC §3.1). Other estimators get the whole shape.
        """
        est: Any = self.estimator
        if not all(hasattr(est, a) for a in ("message_stats", "shape_stats", "scale")):
            view = self.view()
            return view, self.estimator.estimate(RequestShape(view, self.tools))
        projection = self.state.projection
        head = self._canonical[0] if self._canonical else None
        cached = self._view_cache
        n = len(self._canonical)
        if (
            cached is None
            or cached[0] is not projection
            or cached[1] is not head
            or cached[2] > n
            or cached[3] is not self.tools
        ):
            view = self.view()
            stats = est.shape_stats(RequestShape(view, self.tools))
        else:
            view, stats = cached[4], cached[5]
            for message in self._canonical[cached[2] :]:
                if not message.local_only:
                    view.append(message)
                    stats = stats + est.message_stats(message)
        self._view_cache = (projection, head, n, self.tools, view, stats)
        return view, int(est.scale(stats))

    def estimate(self, messages: Sequence[Message] | None = None) -> int:
        """Admission estimate of ``messages`` (default: the current view) with the tools."""
        shape = RequestShape(list(self.view() if messages is None else messages), self.tools)
        return self.estimator.estimate(shape)

    def _count(self, message: Message) -> int:
        """Planning count of one message (tail sizing): the estimator's own per-message count
        when it has one (cached, no request overheads), else a one-message shape."""
        count = getattr(self.estimator, "count_message", None)
        if callable(count):
            return int(count(message))
        return self.estimator.estimate(RequestShape([message]))

    # -- appending ---------------------------------------------------------------------------

    def append(self, *messages: Message) -> None:
        """Append messages to the canonical transcript (tool results bounded at creation)."""
        from ctxfold.kernel.convert import InteropError, check_message

        try:
            for i, message in enumerate(messages):
                check_message(message, where=f"session {self.session_id!r}: append #{i}")
        except InteropError as exc:
            raise SessionError(f"{exc}; nothing was appended") from None
        prepared = [_stamped(_bounded(m)) for m in messages]
        with self._lock:
            self.store.append(self.session_id, prepared)
            self._canonical.extend(prepared)
            self._committer.transcript_version += 1
            self._turn += sum(1 for m in prepared if m.role == "assistant")

    def append_tool_result(self, call_id: str, output: str | bytes, *, tool_name: str) -> Message:
        """Append one tool result, bounded to 32 KiB with the full text kept locally."""
        from ctxfold.kernel.tool_results import make_tool_result

        message = make_tool_result(call_id, output, tool_name=tool_name)
        self.append(message)
        return message

    # -- maintenance -------------------------------------------------------------------------

    def prepare(
        self, trigger: PrepareTrigger = "pressure", focus: str | None = None
    ) -> PreparedRequest:
        """Return the request to send, maintaining the context first if it must (SPEC §3.2)."""
        from ctxfold.kernel.maintain import run_prepare

        with self._lock:
            prepared = run_prepare(self, trigger, focus)
            self._last_shape = RequestShape(prepared.messages, self.tools)
        hook = self._committer.hooks
        if hook is not None and prepared.action != "none":  # below the trigger: no event
            hook.ctxfold_after_prepare(
                session_id=self.session_id, messages=prepared.messages, tokens=prepared.tokens
            )
        return prepared

    def compact(self, focus: str | None = None) -> PreparedRequest:
        """Manual checkpoint (``/compact [focus]``)."""
        return self.prepare("manual", focus)

    def observe_usage(self, usage: Usage) -> bool:
        """Record provider usage for statistics and calibrate the estimator from it.

        Never writes the sidecar or the transcript. Returns True if calibration accepted it.
        """
        self.last_usage = usage
        self._committer.observe_cache(usage)
        if self._last_shape is None:
            return False
        return self.estimator.calibrate(self._last_shape, usage)

    def set_model(self, model: str) -> None:
        """Switch model: calibration is a property of the tokenizer, so it is reset."""
        self.estimator.reset_calibration()
        self.config = attrs.evolve(
            self.config, provider=attrs.evolve(self.config.provider, model=model)
        )
        # The key is workspace | branch | model (SPEC §3.8): a new model is a new cache.
        workspace, branch, _old = ([*self.state.prompt_cache_key.split("|"), "", "", ""])[:3]
        self._committer.state = attrs.evolve(
            self.state, prompt_cache_key=f"{workspace}|{branch}|{model}"
        )

    def use_capability(self, arguments: Any) -> str:
        """Answer a model's ``use_capability`` tool call (``session:tool_result`` paging)
        from this session's own transcript only. Errors come back as text for the model."""
        from ctxfold.kernel.capability import handle_use_capability

        return handle_use_capability(self._canonical, arguments)

    def prune_stale_tool_results(self) -> int:
        """Compatibility no-op (origin §3.4): pruning only happens under pressure. Returns 0."""
        return 0

    def snip_stale_tool_results(self) -> int:
        """Compatibility no-op (origin §3.4): snipping is retired. Returns 0."""
        return 0

    def complete(self, provider: Provider, *, max_output_tokens: int | None = None) -> ChatResponse:
        """Prepare, send to ``provider``, recover from overflow (SPEC §3.6), append the reply."""
        from ctxfold.kernel.recovery import complete_with_recovery

        return complete_with_recovery(self, provider, max_output_tokens=max_output_tokens)

    # -- resume and explicit user operations -------------------------------------------------

    def resume(self, now: float | None = None) -> ResumeResult:
        """Label the cache warm/cold/unknown; never rewrites, installs or calls the network."""
        last = self.store.last_activity(self.session_id) if self._canonical else None
        if last is None and self._canonical:
            stamp = parse_time(self._canonical[-1].created_at)
            last = stamp.timestamp() if stamp else None
        now = self.clock() if now is None else now
        if last is None:
            label, idle = CacheState.UNKNOWN, None
        else:
            idle = max(0.0, now - last)
            label = CacheState.COLD if idle >= self.cache_ttl_minutes * 60 else CacheState.WARM
        notice = COLD_RESUME_NOTICE if label is CacheState.COLD else ""
        self._committer.record_resume(label)
        return ResumeResult(cache_state=label, idle_seconds=idle, notice=notice)

    def rewind(self, upto: int) -> None:
        """Truncate the transcript to its first ``upto`` messages (explicit user operation)."""
        with self._lock:
            self.store.rewind(self.session_id, upto)
            del self._canonical[upto:]
            self._view_cache = None
            self._committer.after_rewind(self._canonical)

    def fork(self, target_id: str, upto: int | None = None) -> ContextManager:
        """A new session from a prefix of this one (explicit user operation)."""
        self.store.fork(self.session_id, target_id, upto)
        return type(self).open(
            target_id,
            config=self.config,
            registry=self._committer.registry,
            tools=self.tools,
            create=False,
            store=self.store,
        )

    # -- used by maintain.py -----------------------------------------------------------------

    def sync_from_store(self) -> None:
        """Re-read the transcript after another process won a compare-and-swap: its appends
        must reach this process's next request too."""
        stored = self.store.load(self.session_id)
        if len(stored) != len(self._canonical):
            self._canonical = list(stored)
            self._view_cache = None
            self._committer.transcript_version += 1

    def input_hash(self, view: Sequence[Message]) -> str:
        return fingerprint(
            [Message(role="system", content=self.state.prompt_cache_key), *view]
        )

    def capture(self) -> Capture:
        return self._committer.capture(len(self._canonical))

    @property
    def committer(self) -> Committer:
        return self._committer

    @property
    def progress(self) -> _Progress:
        return self._progress

    @property
    def turn(self) -> int:
        return self._turn


def _bounded(message: Message) -> Message:
    """Tool results are bounded at creation (SPEC §3.7); the full text stays local. A tool
    message arriving with ``raw_content`` set is bounded from that full text."""
    from ctxfold.kernel.tool_results import TOOL_CONTENT_BOUND, bound_tool_content

    if message.role != "tool" or (
        len(message.content) * 4 <= TOOL_CONTENT_BOUND
        or len(message.content.encode()) <= TOOL_CONTENT_BOUND
    ):
        return message
    full = message.raw_content if message.raw_content is not None else message.content
    content = bound_tool_content(
        full, tool_name=message.name or "tool", call_id=message.tool_call_id or ""
    )
    return attrs.evolve(message, content=content, raw_content=full)


def _stamped(message: Message) -> Message:
    return message if message.created_at else attrs.evolve(message, created_at=utc_now())


__all__ = ["ContextManager", "PreparedRequest", "ResumeResult"]
