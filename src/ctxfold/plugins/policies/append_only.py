"""Policy ``append-only``: never maintains anything.

Every request is the whole transcript so far — the ideal case for the prefix cache and the
baseline every other policy is measured against. A request above the window is an overflow
(the provider would answer HTTP 400, design §7.3); the runner ends the run there and reports the
policy as failed.
"""

from __future__ import annotations

from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import PolicyOptions, StrategyContext, StrategySpec
from ctxfold.kernel.sessions import PolicyRequest
from ctxfold.plugins.policies._common import BasePolicy


class AppendOnlyPolicy(BasePolicy):
    """The transcript, unmaintained."""

    name = "append-only"

    def request(self) -> PolicyRequest:
        return PolicyRequest(messages=tuple(self.history))


def _factory(context: StrategyContext[PolicyOptions]) -> AppendOnlyPolicy:
    return AppendOnlyPolicy(context.options)


@hookimpl
def ctxfold_policies() -> list[StrategySpec]:
    """Register the ``append-only`` policy."""
    return [StrategySpec(name="append-only", factory=_factory,
                         description="never maintains; overflow ends the run (baseline)")]
