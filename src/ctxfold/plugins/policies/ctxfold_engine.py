"""Policies ``ctxfold`` and ``ctxfold-plain``: the real engine, a :class:`~ctxfold.ContextManager`.

``ctxfold`` runs it as configured (by default: standing rules pinned in every checkpoint,
summaries checked and repaired before install); ``ctxfold-plain`` switches both off
(``[checkpoint] extract_rules = false, check = "off"``), so the report measures what they add.

Each canonical message is appended to a session in a private filesystem store (temporary
directory); before each assistant message the policy calls ``prepare()`` — the engine exactly
as specified (SPEC §3.2: one trigger at ``floor(window × compact_ratio)``, prune first, then at
most two folds, 5 % tail, pinned head). Summary requests are counted from the summarizer
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

    def __init__(self, setup: PolicyOptions, context: StrategyContext[PolicyOptions]) -> None:
        self.setup = setup
        # One store per policy: two ctxfold policies of one replay share the work directory.
        config = attrs.evolve(
            context.config,
            agent=AgentConfig(compact_ratio=setup.compact_ratio),
            checkpoint=self.checkpoint or context.config.checkpoint,
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
            tools=setup.tools,
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

    def request(self) -> PolicyRequest:
        self._flush()
        before = len(self.recorder.calls)
        state = self.manager.state.projection
        version = state.projection_version if state else 0
        try:
            prepared = self.manager.prepare()
        except MaintenanceError as exc:
            raise PolicyFailedError(f"policy {self.name}: {exc}") from exc
        calls = [
            SummaryCall(request=req, text=res.text.strip())
            for req, res in self.recorder.calls[before:]
        ]
        installed = prepared.projection_version != version
        summary = next((m for m in prepared.messages if is_summary_message(m)), None)
        if calls and installed and summary is not None:
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


@hookimpl
def ctxfold_policies() -> list[StrategySpec]:
    """Register the ``ctxfold`` and ``ctxfold-plain`` policies."""
    return [StrategySpec(kind="policy", name="ctxfold", factory=_factory,
                         description="the ctxfold engine (ContextManager.prepare) as specified"),
            StrategySpec(kind="policy", name="ctxfold-plain", factory=_plain,
                         description="the ctxfold engine without pinned rules and without the "
                         "summary check (what they add)")]
