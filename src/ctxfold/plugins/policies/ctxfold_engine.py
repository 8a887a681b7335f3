"""Policies ``ctxfold``, ``ctxfold-plain`` and ``ctxfold-boundary``: the real engine, a
:class:`~ctxfold.ContextManager`.

``ctxfold`` runs it as configured (by default: standing rules pinned in every checkpoint,
summaries checked and repaired before install); ``ctxfold-plain`` switches both off
(``[checkpoint] extract_rules = false, check = "off"``), so the report measures what they add.
``ctxfold-boundary`` is ``ctxfold`` whose model also calls ``session:fold`` at each task
boundary the session marks (:class:`BoundaryCtxfoldPolicy`).

Each canonical message is appended to a session in a private filesystem store (temporary
directory); before each assistant message the policy calls ``prepare()`` — the engine exactly
as designed (design §2.4, §2.5: one trigger at ``floor(window × compact_ratio)``, prune first,
then at most two folds, 5 % tail, pinned head). Summary requests are counted from the summarizer
calls (the shared summarizer is wrapped to record them). A ``CompactionRequiredError`` ends
the run as failed.

As a host deploys it: the session's tools, and ctxfold's ``use_capability`` tool (the history
search its summaries point to) once the view holds a checkpoint or a bounded result, as the
engine offers it by default — the engine counts that schema and those requests bill it.
A summary is billed in full: the last summary call of a request answers with the text the
checkpoint installed (the briefing and its appended facts list), not only the briefing.
"""

from __future__ import annotations

import re

import attrs

from ctxfold.capabilities.session_budget import FOLD_ID
from ctxfold.capabilities.tool import with_capability_tool
from ctxfold.engine.opening import open_session
from ctxfold.kernel.config import AgentConfig, CheckpointConfig, SummarizerConfig
from ctxfold.kernel.errors import MaintenanceError, PolicyFailedError
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import PolicyOptions, StrategyContext, StrategySpec
from ctxfold.kernel.registry import Registry
from ctxfold.kernel.sessions import PolicyRequest, SummaryCall
from ctxfold.kernel.summary import is_summary_message, unwrap_summary
from ctxfold.kernel.types import Message, SummaryRequest, SummaryResult
from ctxfold.plugins.policies._common import with_target

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
#: The fair replay bills the facts list the check appends as summary output (issue 25's
#: rule), although the engine appends it without a model call. ``benchmarks/bench_economics``
#: switches this off to show what that modelling choice costs (docs/performance.md).
BILL_FACTS_AS_OUTPUT = True


class _Recorder:
    """Wraps the shared summarizer and keeps every request with its answer."""

    def __init__(self, inner: object, setup: PolicyOptions) -> None:
        self.inner = inner
        self.setup = setup
        self.calls: list[tuple[SummaryRequest, SummaryResult]] = []

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        request = with_target(request, self.setup)
        result: SummaryResult = self.inner.summarize(request)  # type: ignore[attr-defined]
        self.calls.append((request, result))
        return result


class CtxfoldPolicy:
    """The ctxfold engine under replay."""

    name = "ctxfold"
    #: ``[checkpoint]`` of this policy (``None``: the replay's configuration).
    checkpoint: CheckpointConfig | None = None
    #: Offer ``use_capability`` on every request, as a host that lists it among its own
    #: tools does (``False``: once the view holds something to look up, the default).
    always_offer = False

    def __init__(self, setup: PolicyOptions, context: StrategyContext[PolicyOptions]) -> None:
        self.setup = setup
        # One store per policy: two ctxfold policies of one replay share the work directory.
        config = attrs.evolve(
            context.config,
            agent=AgentConfig(compact_ratio=setup.compact_ratio),
            # The replay has no real time (a session's folds land within seconds): the
            # summaries-per-hour cap would count the whole session as one hour.
            checkpoint=attrs.evolve(self.checkpoint or context.config.checkpoint,
                                    max_summaries_per_hour=0),
            summarizer=SummarizerConfig(name="extractive"),
            store=attrs.evolve(context.config.store, name="fs",
                               path=str(setup.workdir / f"{self.name}-store")),
        )
        self.recorder = _Recorder(setup.summarizer, setup)
        session_id = (_UNSAFE.sub("_", setup.session_name) or "session")[:100]
        if not session_id[0].isalnum():
            session_id = "s" + session_id
        registry = context.registry if isinstance(context.registry, Registry) else None
        self.manager = open_session(
            session_id,
            config=config,
            registry=registry,
            tools=with_capability_tool(setup.tools) if self.always_offer else setup.tools,
            estimator=setup.estimator,
            summarizer=self.recorder,
            window=setup.window,
            workspace="replay",
        )
        self._pending: list[Message] = []

    def observe(self, message: Message) -> None:
        # Batched until the next request: one store append (one fsync) per round.
        self._pending.append(message)

    def _flush(self) -> None:
        if self._pending:
            self.manager.append(*self._pending)
            self._pending.clear()

    def _before_prepare(self) -> None:
        """What the host does before a request's ``prepare()`` (its summaries are billed with
        the request)."""

    def request(self) -> PolicyRequest:
        self._flush()
        before = len(self.recorder.calls)
        state = self.manager.state.projection
        version = state.projection_version if state else 0
        try:
            self._before_prepare()
            prepared = self.manager.prepare()
        except MaintenanceError as exc:
            raise PolicyFailedError(f"policy {self.name}: {exc}") from exc
        calls = [
            SummaryCall(request=req, text=res.text.strip())
            for req, res in self.recorder.calls[before:]
        ]
        installed = prepared.projection_version != version
        summary = next((m for m in prepared.messages if is_summary_message(m)), None)
        if calls and installed and summary is not None and BILL_FACTS_AS_OUTPUT:
            # The installed summary: the briefing plus what the check appended to it.
            full = unwrap_summary(summary)
            if full.startswith(calls[-1].text):
                calls[-1] = attrs.evolve(calls[-1], text=full)
        return PolicyRequest(
            messages=prepared.messages,
            summaries=tuple(calls),
            installed=installed,
            prunes=1 if prepared.pruned else 0,
            tools=tuple(prepared.tools),  # use_capability too, once it has something to offer
        )

    def canonical(self) -> tuple[Message, ...]:
        """The transcript as the store has it (re-read from disk, not from memory)."""
        self._flush()
        return tuple(self.manager.store.load(self.manager.session_id))


def _factory(context: StrategyContext[PolicyOptions]) -> CtxfoldPolicy:
    return CtxfoldPolicy(context.options, context)


class PlainCtxfoldPolicy(CtxfoldPolicy):
    """``ctxfold-plain``: the engine with the standing rules and the summary check off."""

    name = "ctxfold-plain"
    checkpoint = CheckpointConfig(extract_rules=False, check="off")


def _plain(context: StrategyContext[PolicyOptions]) -> CtxfoldPolicy:
    return PlainCtxfoldPolicy(context.options, context)


def is_task_boundary(previous: Message | None, message: Message) -> bool:
    """Whether ``message`` starts a new task: a person's ``user`` message (origin ``user``,
    not the host's) right after an assistant reply without tool calls — the agent handed
    the turn back, and the user asks for something next (docs/replay.md, "Task
    boundaries")."""
    return (message.role == "user" and message.origin == "user" and previous is not None
            and previous.role == "assistant" and not previous.tool_calls)


class BoundaryCtxfoldPolicy(CtxfoldPolicy):
    """``ctxfold-boundary``: ``ctxfold`` whose model calls ``session:fold`` at each task
    boundary (:func:`is_task_boundary`) before answering the new task; the capability
    folds only from half the trigger on, so a boundary on a small view costs nothing. It
    offers ``use_capability`` on every request (its schema billed), so the model can fold at
    the first boundary. The call's own round trip (a short tool call and its answer) is not
    in the recorded session and is not billed."""

    name = "ctxfold-boundary"
    always_offer = True

    def __init__(self, setup: PolicyOptions, context: StrategyContext[PolicyOptions]) -> None:
        super().__init__(setup, context)
        self._previous: Message | None = None
        self._boundary = False
        #: The answers of the ``session:fold`` calls made, in order.
        self.fold_answers: list[str] = []

    def observe(self, message: Message) -> None:
        if message.role != "user" or not self._boundary:
            self._boundary = is_task_boundary(self._previous, message)
        self._previous = message
        super().observe(message)

    def _before_prepare(self) -> None:
        if not self._boundary:
            return
        self._boundary = False
        self.fold_answers.append(self.manager.use_capability({
            "action": "call", "capability_id": FOLD_ID,
            "arguments": {"reason": "the previous task is done; a new one starts"}}))


def _boundary(context: StrategyContext[PolicyOptions]) -> CtxfoldPolicy:
    return BoundaryCtxfoldPolicy(context.options, context)


@hookimpl
def ctxfold_policies() -> list[StrategySpec]:
    """Register the ``ctxfold``, ``ctxfold-plain`` and ``ctxfold-boundary`` policies."""
    return [StrategySpec(name="ctxfold", factory=_factory,
                         description="the ctxfold engine (ContextManager.prepare) as specified"),
            StrategySpec(name="ctxfold-plain", factory=_plain,
                         description="the ctxfold engine without pinned rules and without the "
                         "summary check (what they add)"),
            StrategySpec(name="ctxfold-boundary", factory=_boundary,
                         description="the ctxfold engine whose model calls session:fold at "
                         "each task boundary (a user message after a reply without tool "
                         "calls)")]
