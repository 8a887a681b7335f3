"""The ``head-tail`` pressure pruner (design §3.3).

Every tool message of the view whose ``content`` exceeds 8192 code points is cut to its first
4096 code points + ``[... tool result middle pruned ...]`` + its last 1024 code points. The
source is always the bounded, provider-visible ``content`` — never ``raw_content`` (origin
#9033: pruning from the raw text put unbounded output back in front of the model). Every tool
message is eligible, including the recent tail (origin Rev. B).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import StrategyContext, StrategySpec
from ctxfold.kernel.types import Message

PRUNE_THRESHOLD = 8192
PRUNE_HEAD = 4096
PRUNE_TAIL = 1024
PRUNE_MARKER = "[... tool result middle pruned ...]"


def prune_tool_content(text: str) -> str:
    """Head + marker + tail of ``text`` in code points; unchanged at ≤ 8192 code points.

    Python ``str`` indexing is by code point and slicing copies only the slice, so the work
    and the memory are bounded by what is kept, not by the input (origin
    ``TestPruneToolResultAllocationIsBoundedByRetainedContent``).
    """
    if len(text) <= PRUNE_THRESHOLD:
        return text
    return "".join((text[:PRUNE_HEAD], PRUNE_MARKER, text[-PRUNE_TAIL:]))


class HeadTailPruner:
    """The :class:`ctxfold.kernel.contracts.Pruner` registered as ``head-tail``."""

    name = "head-tail"

    def prune(self, view: Sequence[Message]) -> tuple[list[Message], int] | None:
        """Return (new view, number of tool results pruned), or ``None`` if nothing changed.

        Pruned copies keep the envelope (role, name, tool_call_id, created_at, id, origin,
        ...) and get ``raw_content=None``: the projection body must not carry the full text.
        """
        out: list[Message] = []
        count = 0
        for message in view:
            if message.role == "tool" and len(message.content) > PRUNE_THRESHOLD:
                message = attrs.evolve(
                    message, content=prune_tool_content(message.content), raw_content=None
                )
                count += 1
            out.append(message)
        return (out, count) if count else None


def _factory(_context: StrategyContext) -> HeadTailPruner:
    return HeadTailPruner()


@hookimpl
def ctxfold_pruners() -> list[StrategySpec]:
    """Register the ``head-tail`` pruner."""
    return [
        StrategySpec(
            name="head-tail",
            default=True,
            factory=_factory,
            description="tool results over 8192 code points keep the first 4096 and last 1024",
        )
    ]
