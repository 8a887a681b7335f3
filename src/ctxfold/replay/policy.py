"""What a replay policy is, and the helpers the built-in policies share.

A policy (strategy family ``policy``, hook ``ctxfold_policies``) models one way of keeping an
agent session inside its window. The runner feeds it the session's canonical messages one by
one (:meth:`Policy.observe`) and, before each recorded assistant message, asks for the
request it would send (:meth:`Policy.request`). A policy factory receives a
:class:`~ctxfold.kernel.strategies.StrategyContext` whose ``options`` hold a
:class:`PolicySetup` under the key ``"setup"``.

Every summarizing policy gets the same summarizer (by default ``extractive``: offline and
deterministic) and wraps its summary with :func:`ctxfold.kernel.summary.wrap_summary`, so the
comparison measures only *when* and *what* a policy folds, never the summary text itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import attrs

from ctxfold.kernel.errors import MaintenanceError
from ctxfold.kernel.strategies import (
    Estimator,
    StrategyContext,
    Summarizer,
    SummaryRequest,
)
from ctxfold.kernel.summary import (
    build_summary_request,
    summary_output_cap,
    validate_summary_result,
    wrap_summary,
)
from ctxfold.kernel.types import Message, RequestShape, ToolSchema

#: The window peer constants (Codex, opencode) were tuned for: a 200K-token model (Claude
#: Sonnet / GPT-4.1 class). peers.md does not state it; this is the documented assumption of
#: the scaling rule in :func:`scaled`.
REFERENCE_WINDOW = 200_000


class PolicyFailed(MaintenanceError):
    """A policy could not build a request that fits the window (the run stops there)."""


@attrs.frozen
class PolicySetup:
    """What every policy gets: the session's tools, the window, the trigger ratio, the shared
    estimator and summarizer, and a private scratch directory (for the ``ctxfold`` policy's
    store)."""

    tools: tuple[ToolSchema, ...]
    window: int
    compact_ratio: float
    estimator: Estimator
    summarizer: Summarizer
    workdir: Path
    session_name: str = "session"

    @property
    def trigger(self) -> int:
        """``floor(window × compact_ratio)`` — ctxfold's trigger, also truncate-oldest's."""
        return math.floor(self.window * self.compact_ratio)


@attrs.frozen
class SummaryCall:
    """One summary request a policy made and the text it got back (costed as a request)."""

    request: SummaryRequest
    text: str


@attrs.frozen
class PolicyRequest:
    """The request a policy would send before one recorded assistant message.

    ``installed`` is True when the policy changed its projection for this request (summary,
    prune, truncation, masking moved) — the only places where the byte-prefix of the previous
    request may legitimately break. ``prunes`` counts the non-summary changes made.
    """

    messages: tuple[Message, ...]
    summaries: tuple[SummaryCall, ...] = ()
    installed: bool = False
    prunes: int = 0


@runtime_checkable
class Policy(Protocol):
    """A context-maintenance policy under replay."""

    name: str

    def observe(self, message: Message) -> None:
        """Take the next canonical message of the session."""
        ...

    def request(self) -> PolicyRequest:
        """The request to send now; raise :class:`PolicyFailed` when nothing fits."""
        ...

    def canonical(self) -> tuple[Message, ...] | None:
        """The canonical transcript the policy keeps, ``None`` if it keeps none of its own."""
        ...


def setup_of(context: StrategyContext) -> PolicySetup:
    """The :class:`PolicySetup` a factory was given (options key ``"setup"``)."""
    setup = context.options.get("setup")
    if not isinstance(setup, PolicySetup):
        raise MaintenanceError(
            "a replay policy factory needs options['setup'] = PolicySetup(...); build "
            "policies with ctxfold.replay.runner.build_policies()"
        )
    return setup


def scaled(constant: int, window: int, reference: int = REFERENCE_WINDOW) -> int:
    """A peer's token constant scaled to ``window``: unchanged when ``window >= reference``,
    else ``constant × window / reference`` (so a 40K keep at 200K becomes 12.8K at 64K and
    keeps its share of the window)."""
    if window >= reference:
        return constant
    return max(1, round(constant * window / reference))


def rounds(messages: Sequence[Message], start: int = 0) -> list[tuple[int, int]]:
    """``[start, end)`` index ranges of whole rounds from ``start``: an assistant message with
    the tool results that follow it, or any other single message. Cutting only at round
    boundaries never orphans a tool result."""
    out: list[tuple[int, int]] = []
    i = start
    while i < len(messages):
        j = i + 1
        if messages[i].role == "assistant":
            while j < len(messages) and messages[j].role == "tool":
                j += 1
        out.append((i, j))
        i = j
    return out


class BasePolicy:
    """Shared state: the fed history, token counting and summary calls."""

    name = "base"

    def __init__(self, setup: PolicySetup) -> None:
        self.setup = setup
        self.history: list[Message] = []

    def observe(self, message: Message) -> None:
        self.history.append(message)

    def canonical(self) -> tuple[Message, ...] | None:
        """The fed history, which these policies keep and never edit (only their views)."""
        return tuple(self.history)

    def tokens(self, messages: Sequence[Message]) -> int:
        """Admission estimate of ``messages`` with the session's tools."""
        return self.setup.estimator.estimate(RequestShape(list(messages), self.setup.tools))

    def count(self, message: Message) -> int:
        """Tokens of one message (no request overheads)."""
        est = self.setup.estimator
        return est.estimate(RequestShape([message])) - est.estimate(RequestShape([]))

    def summarize(self, request: SummaryRequest) -> tuple[SummaryCall, Message]:
        """Run the shared summarizer once; the call (for costing) and the summary message."""
        result = self.setup.summarizer.summarize(request)
        try:
            text = validate_summary_result(result, session_id=self.setup.session_name)
        except MaintenanceError as exc:
            raise PolicyFailed(f"policy {self.name}: {exc}") from exc
        return SummaryCall(request=request, text=text), wrap_summary(text)

    def summary_request(self, system: Message | None, region: Sequence[Message]) -> SummaryRequest:
        """A cache-aligned summary request (system + region as sent + instruction, tools
        kept), shrunk from the oldest end until it fits the window minus the summary cap."""
        window = self.setup.window
        limit = window - summary_output_cap(window) - 256
        region = list(region)
        while True:
            req = build_summary_request(system, region, self.setup.tools, window=window)
            if len(region) <= 1 or self.tokens(req.messages) <= limit:
                return req
            # Like Codex's local path on ContextWindowExceeded: drop the oldest item.
            region = region[1:]


def first_system(messages: Sequence[Message]) -> Message | None:
    """The leading system message, if any."""
    return messages[0] if messages and messages[0].role == "system" else None


def option(context: StrategyContext, key: str, default: Any) -> Any:
    """A policy option from ``context.options`` (tests tune constants this way)."""
    return context.options.get(key, default)
