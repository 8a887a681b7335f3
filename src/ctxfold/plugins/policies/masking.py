"""Policy ``masking``: observation masking — only the last M tool results stay verbatim.

Models "The Complexity Trap" (Lindenbauer et al., JetBrains Research, arXiv 2508.21433;
peers.md §13): every environment observation except the newest ``M = 10`` is replaced by a
short placeholder, while the agent's reasoning and actions stay. OpenHands'
ObservationMasking condenser does the same with ``<MASKED>`` (peers.md §4). There is no
summary; when even the masked request does not fit the window the run fails (overflow).

Each request where the masked set moves is a projection change (counted as a prune): the
placeholder rewrites a message that the provider had cached, so the prefix breaks there.
"""

from __future__ import annotations

import attrs

from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import PolicyOptions, StrategyContext, StrategySpec
from ctxfold.kernel.sessions import PolicyRequest
from ctxfold.plugins.policies._common import BasePolicy, constants

#: Tool results kept verbatim (the paper's window M = 10).
KEEP_LAST = 10
PLACEHOLDER = "[Old tool result omitted: {lines} lines]"


class MaskingPolicy(BasePolicy):
    """All but the last ``keep_last`` tool results masked."""

    name = "masking"

    def __init__(self, setup: PolicyOptions, keep_last: int = KEEP_LAST) -> None:
        super().__init__(setup)
        self.keep_last = keep_last
        self._masked_upto = -1  # history index of the newest masked tool result

    def request(self) -> PolicyRequest:
        tool_indices = [i for i, m in enumerate(self.history) if m.role == "tool"]
        masked = set(tool_indices[:-self.keep_last]) if self.keep_last else set(tool_indices)
        view = []
        for i, message in enumerate(self.history):
            if i in masked:
                lines = message.content.count("\n") + 1
                message = attrs.evolve(message, content=PLACEHOLDER.format(lines=lines),
                                       raw_content=None)
            view.append(message)
        newest = max(masked, default=-1)
        changed = newest != self._masked_upto
        self._masked_upto = newest
        return PolicyRequest(messages=tuple(view), installed=changed, prunes=int(changed))


def _factory(context: StrategyContext[PolicyOptions]) -> MaskingPolicy:
    tuned = constants(context.options, "masking", {"keep_last": KEEP_LAST})
    return MaskingPolicy(context.options, keep_last=int(tuned["keep_last"]))


@hookimpl
def ctxfold_policies() -> list[StrategySpec]:
    """Register the ``masking`` policy."""
    return [StrategySpec(name="masking", factory=_factory,
                         description="observation masking: all but the last 10 tool results "
                                     "replaced by a placeholder (JetBrains, 2025)")]
