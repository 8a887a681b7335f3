"""When a request offers ``use_capability``: when the view holds something the model can look
up — a projection (a checkpoint, or pruned tool results) or a bounded tool result — and only
then (docs/api.md, "The `use_capability` tool"). Until then the tool list is the host's, byte
for byte; the tool is added once and stays while there is something to look up, so the cached
prefix breaks at most once for
it (at the first bounded result, or at the first install, which breaks it anyway).
"""

from __future__ import annotations

from ctxfold.capabilities.tool import with_capability_tool
from ctxfold.engine.transcript import Transcript
from ctxfold.kernel.state import Projection
from ctxfold.kernel.types import ToolSchema


class CapabilityOffer:
    """The tools of a session's requests: the host's ``tools``, and ``use_capability`` when
    there is something to look up (always when the host offers it itself, as the proxy does;
    never with ``enabled=False``, a host that answers no tool calls). A transcript only grows
    between :meth:`reset` calls, so each tool result is looked at once."""

    def __init__(self, tools: tuple[ToolSchema, ...], *, enabled: bool = True) -> None:
        self.tools = tools
        self.offered = with_capability_tool(tools) if enabled else tools
        self.reset()

    def reset(self) -> None:
        """Forget what was found (a new or rewound transcript)."""
        self._bounded = False
        self._scanned = 0

    def offers(self, projection: Projection | None, canonical: Transcript) -> bool:
        """Whether a request with this ``projection`` over ``canonical`` offers the tool."""
        if self.offered is self.tools:  # the host's own (or, disabled, never)
            return any(t.name == "use_capability" for t in self.tools)
        if projection is not None or self._bounded:
            return True
        positions = canonical.positions("tool")
        for i in positions[self._scanned:]:
            if canonical[i].raw_content is not None:  # bounded at creation: text to page
                self._bounded = True
                break
        self._scanned = len(positions)
        return self._bounded

    def tools_for(self, projection: Projection | None, canonical: Transcript
                  ) -> tuple[ToolSchema, ...]:
        """The tools the request carries (one of two tuples, so estimates can cache them)."""
        return self.offered if self.offers(projection, canonical) else self.tools


__all__ = ["CapabilityOffer"]
