"""What older writers and callers left behind, kept working: the product's compatibility
promise in one place (docs/architecture.md, "Compatibility").

Nothing here is written by ctxfold today; all of it is read, accepted or answered so that
files, configs and callers from before keep working:

* the origin's retired ``[agent]`` keys (design §8.2, §8.3): loaded, zeroed in memory, one
  notice; ``ctxfold config migrate`` removes them from files;
* the origin's sidecar fields and receipt labels (design §5.5): read and ignored, or read as
  the label they are now;
* tool results shortened by older code, which kept no full text (their markers);
* projections written while full tool output was provider-visible, and ctxfold 0.1.0's flat
  covered-prefix hash (design §5.3, §5.6): accepted and re-normalised;
* the no-op ``prune_stale_tool_results()`` / ``snip_stale_tool_results()`` (design §8.2).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from ctxfold.kernel.fingerprint import fingerprint
from ctxfold.kernel.types import Message

#: ``[agent]`` keys of the retired multi-threshold design (design §8.2). They load without
#: error, are zeroed in memory, and ``ctxfold config migrate`` removes them from files.
LEGACY_AGENT_KEYS = (
    "soft_compact_ratio",
    "tool_result_snip_ratio",
    "compact_force_ratio",
    "cold_resume_prune",
    "context_editing",
)

#: Top-level fields of pre-v3 (and origin v3) sidecars: decoded, ignored, never written.
LEGACY_SIDECAR_FIELDS = (
    "last_trigger",
    "last_mode",
    "last_source_tokens",
    "last_result_tokens",
    "last_compaction_cost",
    "blocked_input_hash",
    "blocked_reason",
    "native_context_editing_accepted",
    "context_editing_fallback_local",
)

#: Receipt actions of older writers, read as the action they are now: both cut tool results
#: out of the view, which is what a prune does. Re-encoding writes the new label.
LEGACY_RECEIPT_ACTIONS = {"snip": "prune", "native_tool_clear": "prune"}

#: Markers older code left in a tool result it shortened without keeping ``raw_content``.
LEGACY_TOOL_RESULT_MARKERS = re.compile(
    r"\[truncated tool=|\[INCOMPLETE READ|\[\.\.\. tool result middle pruned \.\.\.\]"
    r"|\[\.\.\. ?(?:truncated|snipped)|\[tool result (?:truncated|snipped|pruned)"
)


def promoted(messages: Sequence[Message]) -> list[Message]:
    """The 'promoted' form earlier writers hashed (design §5.6): tool results carried their
    full raw text."""
    return [
        attrs.evolve(m, content=m.raw_content)
        if m.role == "tool" and m.raw_content is not None
        else m
        for m in messages
    ]


def is_0_1_flat_hash(stored: str, prefix: Sequence[Message]) -> bool:
    """Whether ``stored`` is the covered-prefix hash ctxfold 0.1.0 wrote for ``prefix``: the
    flat fingerprint of the whole prefix, before the hash became a chain (design §5.3).

    Those sidecars are released data, so they load as valid and are re-normalised to the
    chain (the next save persists it); this is the one place that reads the flat form.
    """
    return fingerprint(prefix) == stored


def prune_stale_tool_results(_session: object) -> int:
    """A compatibility no-op that returns 0 (design §8.2): pruning happens only under
    pressure, inside ``prepare()``. ``snip_stale_tool_results`` is the same no-op (the
    snip it named is retired); both stay so that old callers keep working."""
    return 0
