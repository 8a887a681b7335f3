"""Policy ``truncate-oldest``: drop the oldest rounds until the request fits under the trigger.

The naive sliding window many simple agents use (peers.md §7: Cline's ``basic`` strategy, the
deterministic truncation it forces for overflow recovery; Claude Code's head truncation of the
oldest API-round groups on "prompt too long", §2). When the request reaches
``floor(window × compact_ratio)`` (the same trigger as ctxfold, so the two are comparable),
the oldest non-system messages are dropped in whole rounds — an assistant message together
with its tool results — so a tool result is never orphaned. Dropped messages stay dropped.
No summary is written, so nothing of the dropped history survives.
"""

from __future__ import annotations

from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import PolicyOptions, StrategyContext, StrategySpec
from ctxfold.kernel.sessions import PolicyRequest
from ctxfold.plugins.policies._common import BasePolicy, first_system, rounds


class TruncateOldestPolicy(BasePolicy):
    """Sliding window over whole rounds."""

    name = "truncate-oldest"

    def __init__(self, setup: PolicyOptions) -> None:
        super().__init__(setup)
        self.start = 0  # index in history of the oldest kept non-system message

    def request(self) -> PolicyRequest:
        history = self.history
        system = first_system(history)
        head = [system] if system is not None else []
        self.start = max(self.start, len(head))
        view = head + history[self.start:]
        trigger = self.setup.trigger
        if self.tokens(view) < trigger:
            return PolicyRequest(messages=tuple(view))
        # Drop whole rounds from the front (never the newest one), subtracting their
        # per-message counts instead of re-estimating the whole view each time.
        total = self.tokens(view)
        dropped = 0
        for begin, end in rounds(history, self.start)[:-1]:
            total -= sum(self.count(m) for m in history[begin:end])
            self.start = end
            dropped += 1
            if total < trigger:
                break
        view = head + history[self.start:]
        return PolicyRequest(messages=tuple(view), installed=dropped > 0, prunes=int(dropped > 0))


def _factory(context: StrategyContext[PolicyOptions]) -> TruncateOldestPolicy:
    return TruncateOldestPolicy(context.options)


@hookimpl
def ctxfold_policies() -> list[StrategySpec]:
    """Register the ``truncate-oldest`` policy."""
    return [StrategySpec(name="truncate-oldest", factory=_factory,
                         description="drops the oldest whole rounds until under the trigger")]
