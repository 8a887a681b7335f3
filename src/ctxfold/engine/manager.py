"""The ContextManager: the one object an agent holds per session (design §1–§6).

It composes parts — the canonical transcript, the committer (sidecar state), the strategies
(:class:`~ctxfold.engine.parts.SessionParts`), the view tracker, the runtime latches — and
drives :func:`ctxfold.kernel.maintenance.maintain`, the only automatic maintenance, performing
the effects it yields (:meth:`ContextManager._effects`); everything else only reads, appends,
or records statistics.
"""

from __future__ import annotations

import asyncio
import math
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ctxfold.capabilities import session_budget
from ctxfold.capabilities.bounding import make_tool_result
from ctxfold.capabilities.session_budget import Budget, Folded, FoldRequest
from ctxfold.capabilities.tool import (
    answering,
    capability_call,
    handle_use_capability,
    parse_call,
    requested_capability,
)
from ctxfold.engine import driving, lineage
from ctxfold.engine import turn as turns
from ctxfold.engine.check import Checker
from ctxfold.engine.counts import PersistedCounts
from ctxfold.engine.offer import CapabilityOffer
from ctxfold.engine.parts import (
    LoadedSession,
    SessionParts,
    SessionWarning,
    checked_batch,
    load_session,
    repeated_system,
    with_model,
)
from ctxfold.engine.pins import new_pin
from ctxfold.engine.prepared import (
    PreparedRequest,
    ResumeResult,
    UsageObservation,
    calibrate,
    resume_label,
    wire_fields,
)
from ctxfold.engine.sidecar import session_settings
from ctxfold.engine.summarizing import asummarize, text_repaired
from ctxfold.engine.sync import Watch
from ctxfold.engine.transcript import CallIds, Transcript, count_role, vouch
from ctxfold.interop.usage import usage_from
from ctxfold.kernel import compat, maintenance
from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import (
    AsyncProvider,
    Estimator,
    Provider,
    Pruner,
    Store,
    Summarizer,
)
from ctxfold.kernel.errors import MaintenanceError, ProviderError, StaleContextError
from ctxfold.kernel.maintenance import (
    PROTOCOL_RESERVE,
    AfterInstall,
    Commit,
    Latches,
    MaintenanceContext,
    Outcome,
    Reread,
    Stored,
    Summarize,
)
from ctxfold.kernel.state import Action, SidecarState
from ctxfold.kernel.summary import is_summary_message
from ctxfold.kernel.types import (
    ChatRequest,
    ChatResponse,
    Message,
    RequestShape,
    ToolSchema,
    Trigger,
    Usage,
)
from ctxfold.kernel.view import ViewTracker, message_counter, visible_view


class ContextManager:
    """Maintains one session's context. Get one with :func:`ctxfold.open_session`."""

    def __init__(self, parts: SessionParts, loaded: LoadedSession) -> None:
        self._parts = parts
        self.session_id: str = parts.session_id
        self.store: Store = parts.store
        self.estimator: Estimator = parts.estimator
        self.pruner: Pruner = parts.pruner
        self.summarizer: Summarizer = parts.summarizer
        self._committer = loaded.committer
        self._hooks: Any = parts.registry.pm.hook
        self._watch = Watch(parts.store, parts.session_id, loaded.revision)
        self.notices: list[str] = list(loaded.notices)
        self.config: Config = parts.config
        self._offer = CapabilityOffer(parts.tools, enabled=parts.offer_capability)
        self.configured_window = parts.window
        self.learned_window: int | None = None
        self.cache_ttl_minutes = parts.cache_ttl_minutes
        self.clock = parts.clock
        self.last_usage: Usage | None = None
        self.summary_calls = 0
        self._latches = Latches()
        self._views = ViewTracker(parts.estimator)
        self._count = message_counter(parts.estimator)
        self._counts = PersistedCounts(parts.store, parts.session_id, parts.estimator)
        self._lock = threading.RLock()
        self._alock = asyncio.Lock()
        self._last_shape: RequestShape | None = None
        self._take(loaded.canonical)

    def _take(self, canonical: Transcript) -> None:
        """Work from ``canonical`` (loaded, re-read, or after a rewind)."""
        self._canonical = canonical
        self._call_ids = CallIds(canonical)
        self._offer.reset()
        self._turn = count_role(canonical, "assistant")  # a turn ends with the answer
        self._views.reset()
        vouch(self.store, self.session_id, canonical, self.state.projection,
              self._watch.revision)

    def _sync(self) -> bool:
        """Before working from memory: take over what another process committed."""
        synced = self._watch.resync(self._committer)
        if synced is not None:
            self._take(synced[0])
            self.notices.extend(synced[1])
        return synced is not None

    def sync(self) -> bool:
        """Take over what another process committed to this session (appends, installs, a
        rewind); True when the transcript was re-read, so whatever a caller derived from it
        must be derived again. ``prepare()`` and ``append()`` do this themselves."""
        with self._lock:
            return self._sync()

    def messages_from(self, start: int) -> list[Message]:
        """The transcript's messages from index ``start`` on (not a copy of the whole
        transcript: a reopened session's covered prefix stays undecoded)."""
        with self._lock:
            return self._canonical[start:]

    @property
    def message_count(self) -> int:
        """How many messages the transcript holds."""
        return len(self._canonical)

    # -- parts and state ---------------------------------------------------------------------

    @property
    def canonical(self) -> tuple[Message, ...]:
        """The canonical transcript (read-only copy)."""
        return tuple(self._canonical)

    @property
    def state(self) -> SidecarState:
        """The current sidecar state."""
        return self._committer.state

    @property
    def turn(self) -> int:
        """Model turns so far (assistant messages in the transcript)."""
        return self._turn

    @property
    def window(self) -> int:
        """Effective context window: min(configured, learned from an overflow error)."""
        return min(self.configured_window, self.learned_window or self.configured_window)

    @property
    def trigger_tokens(self) -> int:
        """``floor(window × compact_ratio)``: the one automatic trigger."""
        return math.floor(self.window * self.config.agent.compact_ratio)

    @property
    def hard_ceiling(self) -> int:
        """``window − 256``: above it nothing may be sent."""
        return self.window - PROTOCOL_RESERVE

    # -- reading -----------------------------------------------------------------------------

    def view(self) -> list[Message]:
        """Provider-visible messages: projection body + canonical tail, else canonical."""
        return visible_view(self.state.projection, self._canonical)

    @property
    def tools(self) -> tuple[ToolSchema, ...]:
        """The host's tools, which every request carries (and counts)."""
        return self._offer.tools

    @tools.setter
    def tools(self, tools: Sequence[ToolSchema]) -> None:
        """Other tools from now on (a proxy's client may change them between requests)."""
        tools = tuple(tools)
        if tools != self._offer.tools:
            self._offer = CapabilityOffer(tools, enabled=self._parts.offer_capability)

    @property
    def offers_capability(self) -> bool:
        """Whether the next request offers ``use_capability`` (:mod:`ctxfold.engine.offer`)."""
        return self._offer.offers(self.state.projection, self._canonical)

    def request_tools(self) -> tuple[ToolSchema, ...]:
        """The next request's tools: :attr:`tools`, then ``use_capability`` when offered."""
        return self._offer.tools_for(self.state.projection, self._canonical)

    def view_estimate(self) -> tuple[list[Message], int]:
        """The current view and its admission estimate, in O(new messages) between installs
        with an incremental estimator. The list is shared: do not mutate it."""
        return self._views.measure(self.state.projection, self._canonical, self.request_tools())

    def estimate(self, messages: Sequence[Message] | None = None) -> int:
        """Admission estimate of ``messages`` (default: the current view) with the tools."""
        shape = RequestShape(list(self.view() if messages is None else messages),
                             self.request_tools())
        return self.estimator.estimate(shape)

    # -- appending ---------------------------------------------------------------------------

    def append(self, *messages: Any) -> None:
        """Append messages to the canonical transcript as one batch (tool results bounded at
        creation). Each may be a :class:`Message`, an OpenAI chat message dict, a Responses
        input item or an OpenAI SDK message object; content parts are kept exactly as given.
        A malformed message raises :class:`MessageError` naming its index and field, and
        nothing is appended."""
        with self._lock:
            self._sync()
            batch, calls = checked_batch(messages, self._call_ids,
                                         f"session {self.session_id!r}: append")
            repeated = repeated_system(self.session_id, self._canonical, batch)
            if not self._watch.append(batch):  # an earlier attempt had stored it
                self._sync()
                return
            self._call_ids.add(calls)
            self._canonical.extend(batch)
            self._turn += sum(1 for m in batch if m.role == "assistant")
        if repeated:  # allowed, but probably a script run twice: say so
            self.notices.append(repeated)
            warnings.warn(repeated, SessionWarning, stacklevel=2)

    def pin(self, text: str | None = None, *, message_id: str | None = None,
            reason: str = "") -> Message:
        """Pin a standing rule — ``text``, or the text of the message ``message_id`` (``#N``
        or an id) — so that every checkpoint carries it verbatim right after the task. The
        pin is recorded in the transcript (never sent); it returns that record."""
        with self._lock:
            self._sync()
            self.append(new_pin(self._canonical, text, message_id, reason, count=self._count,
                                budget=int(self.window * self.config.checkpoint.pins_ratio)))
            return self._canonical[-1]

    def append_tool_result(self, call_id: str, output: str | bytes, *, tool_name: str) -> Message:
        """Append one tool result, bounded to 32 KiB with the full text kept locally."""
        message = make_tool_result(call_id, output, tool_name=tool_name)
        self.append(message)
        return message

    # -- maintenance -------------------------------------------------------------------------

    def _maintenance(self, trigger: Trigger, focus: str | None, tools: tuple[ToolSchema, ...]
                     ) -> tuple[maintenance.Maintenance, Callable[[object], object]]:
        """One maintenance run over the session as it is now, and the performer of its
        steps other than summaries."""
        settings = session_settings(self.window, self.trigger_tokens, self.config,
                                    self.estimator)
        if self.state.settings != settings:  # written with the next install or receipt only
            self._committer.state = attrs.evolve(self.state, settings=settings)
        view, tokens = self._views.measure(self.state.projection, self._canonical, tools)
        context = MaintenanceContext(
            session_id=self.session_id, trigger=trigger, focus=focus, window=self.window,
            trigger_tokens=self.trigger_tokens, turn=self._turn, latches=self._latches,
            tools=tools, canonical=self._canonical, estimator=self.estimator,
            pruner=self.pruner, count=self._count, state=self.state,
            cached_tokens=self._committer.cached_tokens, clock=self._committer.clock,
            check=Checker(self.config.checkpoint, self._count),
            max_summaries_per_hour=self.config.checkpoint.max_summaries_per_hour,
        )
        return maintenance.maintain(context, view, tokens), self._effects(self._canonical)

    def _effects(self, held: Transcript) -> Callable[[object], object]:
        """Perform the maintenance steps other than summaries — a compare-and-swap commit,
        the re-read after a lost one, the install hook — for a run working from the
        transcript ``held``: an install captured over it loses once a rewind or a re-read
        replaced it (an append the run itself sees)."""

        def perform(step: object) -> object:
            nonlocal held
            if isinstance(step, Commit):
                if step.captured is not None and held is not self._canonical:
                    raise StaleContextError(
                        "the transcript was rewound or re-read during the operation")
                return self._committer.commit(step)
            if isinstance(step, Reread):  # take over the stored transcript and sidecar
                self._watch.stale = True
                self._sync()
                held = self._canonical
                return Stored(held, self.state)
            if isinstance(step, AfterInstall):
                self._hooks.ctxfold_after_install(session_id=self.session_id,
                                                  receipt=step.receipt)
                return None
            raise TypeError(f"not a maintenance step: {step!r}")

        return perform

    def _apply(self, outcome: Outcome, tools: tuple[ToolSchema, ...],
               trigger: Trigger) -> PreparedRequest:
        """Take over what a maintenance run (estimated with ``tools``) ended with, then raise
        its error if any. A prepared request is one more request on the view's ledger entry,
        unless a manual compaction made it (the host need not send that one)."""
        self._latches = outcome.latches
        self.summary_calls += outcome.summary_calls
        sent = self.request_tools()
        if sent is not tools:  # the first install offered use_capability: count it too
            outcome = attrs.evolve(outcome, tokens=self._views.measure(
                self.state.projection, self._canonical, sent)[1])
        prepared = PreparedRequest.of(outcome, sent, self.state.projection, self.trigger_tokens,
                                      **wire_fields(self.config, self.window, outcome.tokens,
                                                    self._parts.provider_defaults,
                                                    offers=self.offers_capability))
        self._last_shape = RequestShape(prepared.messages, sent)
        self._counts.save()  # caches, so the next open reads neither counts nor covered lines
        vouch(self.store, self.session_id, self._canonical, self.state.projection,
              self._watch.revision)
        if outcome.error is not None:
            raise outcome.error
        if trigger != "manual":
            self._committer.count_request()
        if prepared.action is not Action.NONE:  # below the trigger: no event
            self._hooks.ctxfold_after_prepare(session_id=self.session_id,
                                              messages=prepared.messages, tokens=prepared.tokens)
        return prepared

    def prepare(self, trigger: Trigger = "pressure", focus: str | None = None) -> PreparedRequest:
        """Return the request to send, maintaining the context first if it must (design §2.5)."""
        with self._lock:
            self._sync()
            tools = self.request_tools()
            steps, effects = self._maintenance(trigger, focus, tools)

            def perform(step: maintenance.Step) -> object:
                if isinstance(step, Summarize):
                    return text_repaired(self.summarizer.summarize(step.request))
                return effects(step)

            outcome = driving.drive(steps, perform)
            return self._apply(outcome, tools, trigger)

    def compact(self, focus: str | None = None) -> PreparedRequest:
        """Manual checkpoint (``/compact [focus]``)."""
        return self.prepare("manual", focus)

    async def aprepare(
        self, trigger: Trigger = "pressure", focus: str | None = None
    ) -> PreparedRequest:
        """:meth:`prepare` for an event loop: the same rules and invariants, the summary
        awaited (an async ``summarize`` callable, or a sync summarizer in a worker thread)."""
        async with self._alock:
            with self._lock:
                self._sync()
                tools = self.request_tools()
                steps, effects = self._maintenance(trigger, focus, tools)

            async def perform(step: maintenance.Step) -> object:
                if isinstance(step, Summarize):
                    return text_repaired(await asummarize(self.summarizer, step.request))
                return effects(step)

            outcome = await driving.adrive(steps, perform)
            with self._lock:
                return self._apply(outcome, tools, trigger)

    async def acompact(self, focus: str | None = None) -> PreparedRequest:
        """:meth:`compact` for an event loop."""
        return await self.aprepare("manual", focus)

    def observe_usage(self, usage: Any) -> UsageObservation:
        """Record provider usage for statistics and calibrate the estimator from it.

        ``usage`` may be a :class:`Usage`, a chat-completions or Responses usage dict, or the
        OpenAI SDK's usage object. Never writes the sidecar or the transcript. The result is
        true when calibration accepted it; its ``reason`` says why it did not.
        """
        observed, why = usage_from(usage)
        if observed is None:
            return UsageObservation(False, f"ignored: {why}")
        with self._lock:  # the ledger's update must not undo a concurrent install
            self.last_usage = observed
            self._committer.observe_cache(observed)
            return calibrate(self.estimator, self._last_shape, observed)

    def set_model(self, model: str) -> None:
        """Switch model: calibration is a property of the tokenizer, so it is reset."""
        self.estimator.reset_calibration()
        self.config = attrs.evolve(self.config,
                                   provider=attrs.evolve(self.config.provider, model=model))
        key = with_model(self.state.prompt_cache_key, model)  # a new model is a new cache
        self._committer.state = attrs.evolve(self.state, prompt_cache_key=key)

    def use_capability(self, arguments: Any) -> str:
        """Answer a ``use_capability`` call from this session; errors as text.

        ``session:fold`` folds here, before the host appends the answer: the fold covers
        only messages before the newest round (the 5 % tail always keeps the last assistant
        message, the one holding the call, and what follows it), so the call and its answer
        stay verbatim after the new checkpoint, and the next request carries both."""
        with self._lock:
            self._sync()
            return handle_use_capability(self._canonical, arguments, _Control(self))

    def answer(self, tool_call: Any) -> dict[str, Any] | None:
        """The tool message answering ``tool_call`` if it calls ``use_capability`` (in the
        call's chat or Responses form, ready to append), else ``None``: see
        :func:`~ctxfold.capabilities.tool.capability_call`."""
        call = capability_call(tool_call)
        return None if call is None else call.reply(self.use_capability(call.arguments))

    async def aanswer(self, tool_call: Any) -> dict[str, Any] | None:
        """:meth:`answer` for an event loop (the capability runs in a worker thread; a
        ``session:fold`` runs :meth:`acompact`, its summary awaited)."""
        call = capability_call(tool_call)
        if call is None:
            return None
        if requested_capability(call.arguments) == session_budget.FOLD_ID:
            return call.reply(await self._afold(call.arguments))
        return call.reply(await asyncio.to_thread(self.use_capability, call.arguments))

    def _budget(self) -> Budget:
        """What ``session:budget`` answers: the window, the trigger, the prompt estimate
        and what has been folded (:mod:`ctxfold.capabilities.session_budget`)."""
        with self._lock:
            self._sync()
            _view, tokens = self.view_estimate()
            state = self.state
            projection = state.projection
            folded = projection is not None and any(is_summary_message(m)
                                                    for m in projection.messages)
            last = next((t for t in reversed(state.telemetry) if t.kind == "install"
                         and t.action == "summary" and projection is not None
                         and t.projection_version == projection.projection_version), None)
            return Budget(
                window=self.window, input_budget=self.hard_ceiling,
                trigger_tokens=self.trigger_tokens,
                compact_ratio=self.config.agent.compact_ratio, prompt_tokens=tokens,
                # The telemetry keeps the newest 256 records: past that, a lower bound.
                checkpoints=sum(1 for t in state.telemetry
                                if t.kind == "install" and t.action == "summary"),
                messages=len(self._canonical),
                folded_messages=projection.covered_count if folded and projection else 0,
                reported_prompt_tokens=self.last_usage.prompt_tokens if self.last_usage
                else None,
                grown=None if last is None else max(tokens - last.tokens_after, 0))

    def _folded(self, action: str, why: str = "") -> Folded:
        after = self._budget()
        receipt = self.state.last_receipt
        if action != "summary" and not why and receipt is not None:
            why = receipt.reason
        return Folded(action=action, tokens_after=after.prompt_tokens,
                      checkpoints=after.checkpoints, folded_messages=after.folded_messages,
                      why=why)

    def _fold(self, request: FoldRequest) -> Folded:
        try:
            prepared = self.compact(request.focus)
        except (MaintenanceError, ProviderError) as exc:  # the summary failed: say so
            return self._folded("failed", f"the summary failed, nothing was folded: {exc}")
        return self._folded(prepared.action.value)

    async def _afold(self, arguments: Any) -> str:
        """``session:fold`` for an event loop: the sync path's checks (in a worker thread),
        then :meth:`acompact`."""
        def check() -> tuple[FoldRequest, Budget] | str:
            parsed = parse_call(arguments)
            assert parsed is not None  # requested_capability() said session:fold
            return session_budget.check_fold(_Control(self), parsed[1])

        checked = await asyncio.to_thread(answering, check)
        if isinstance(checked, str):  # refused, or the model's bad arguments
            return checked
        request, before = checked
        try:
            prepared = await self.acompact(request.focus)
            folded = await asyncio.to_thread(self._folded, prepared.action.value)
        except (MaintenanceError, ProviderError) as exc:  # the summary failed: say so
            folded = await asyncio.to_thread(
                self._folded, "failed", f"the summary failed, nothing was folded: {exc}")
        return session_budget.fold_answer(before, folded)

    prune_stale_tool_results = compat.prune_stale_tool_results
    snip_stale_tool_results = compat.prune_stale_tool_results

    # -- one model turn ----------------------------------------------------------------------

    def _turn_context(self, max_output_tokens: int | None) -> turns.TurnContext:
        return turns.TurnContext.of(self.session_id, self.config, self.state.prompt_cache_key,
                                    max_output_tokens, window=lambda: self.window,
                                    estimate=self.estimate)

    def _learn(self, step: turns.Learn) -> None:  # window = min(configured, learned)
        self.learned_window = turns.learn(step, self.learned_window, self.estimator)

    def _before_request(self, provider: Provider, request: ChatRequest) -> None:
        turns.before_request(self._hooks, self.session_id, provider, request)

    def complete(self, provider: Provider, *, max_output_tokens: int | None = None) -> ChatResponse:
        """Prepare, send to ``provider``, recover from overflow (design §7.3), append the reply
        and observe its usage."""
        def perform(step: turns.TurnStep) -> object:
            if isinstance(step, turns.Send):
                self._before_request(provider, step.request)
                return provider.complete(step.request)
            if isinstance(step, turns.Prepare):
                return self.prepare(step.trigger)
            self._learn(step)
            return None

        response = driving.drive(turns.turn(self._turn_context(max_output_tokens)), perform)
        self.append(response.message)
        self.observe_usage(response.usage)
        return response

    async def acomplete(
        self, provider: Provider, *, max_output_tokens: int | None = None
    ) -> ChatResponse:
        """:meth:`complete` for an event loop (a sync provider runs in a worker thread)."""
        async def perform(step: turns.TurnStep) -> object:
            if isinstance(step, turns.Send):
                self._before_request(provider, step.request)
                if isinstance(provider, AsyncProvider):
                    return await provider.acomplete(step.request)
                return await asyncio.to_thread(provider.complete, step.request)
            if isinstance(step, turns.Prepare):
                return await self.aprepare(step.trigger)
            self._learn(step)
            return None

        response = await driving.adrive(turns.turn(self._turn_context(max_output_tokens)),
                                        perform)
        self.append(response.message)
        self.observe_usage(response.usage)
        return response

    # -- resume and explicit user operations -------------------------------------------------

    def resume(self, now: float | None = None) -> ResumeResult:
        """Label the cache warm/cold/unknown; never rewrites, installs or calls the network."""
        last = self.store.last_activity(self.session_id) if self._canonical else None
        result = resume_label(last, self._canonical, self.clock() if now is None else now,
                              self.cache_ttl_minutes)
        self._committer.record_resume(result.cache_state)
        return result

    def rewind(self, upto: int) -> str:
        """Go back to the first ``upto`` messages, keeping the history as it was as a new
        session (:mod:`ctxfold.engine.lineage`); its id, ``""`` when nothing was dropped."""
        with self._lock:
            self._sync()
            kept = lineage.rewind(self.store, self.session_id, upto)
            self._watch.revision = self.store.revision(self.session_id)
            self._take(Transcript(self._canonical[:upto]))
            self._committer.after_rewind(self._canonical)
            return kept

    def fork(self, target_id: str, upto: int | None = None) -> ContextManager:
        """A new session from the first ``upto`` messages (default: all), with this one's
        checkpoint when that lies within them (validated like any other)."""
        self.store.fork(self.session_id, target_id, upto)
        parts = attrs.evolve(self._parts, session_id=target_id)
        return ContextManager(parts, load_session(parts, create=False))

    @property
    def fork_point(self) -> lineage.ForkPoint | None:
        """Where this session was forked from; ``None`` when it was created."""
        return lineage.fork_point(self.store, self.session_id)


class _Control:
    """The live session ``session:budget`` and ``session:fold`` answer from (the
    :class:`~ctxfold.capabilities.session_budget.SessionControl` of a manager)."""

    def __init__(self, cm: ContextManager) -> None:
        self.cm = cm

    def budget(self) -> Budget:
        return self.cm._budget()

    def fold(self, request: FoldRequest) -> Folded:
        return self.cm._fold(request)


__all__ = ["ContextManager", "ResumeResult", "SessionWarning", "UsageObservation"]
