"""Importer ``swe-agent``: SWE-agent ``.traj`` trajectories.

Only ``history[]`` is read: it holds the messages as sent to the model. ``role``,
``content`` and ``tool_calls`` map directly and ``tool_call_id = tool_call_ids[0]``;
``message_type``, ``thought``, ``action`` and ``agent`` are metadata. ``trajectory[].messages``
repeats the prompt at every step and is ignored (transcripts README §5). The format records
no provider usage per message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxfold.importing import SessionBuilder
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import StrategyContext, StrategySpec
from ctxfold.kernel.sessions import ImportedSession
from ctxfold.plugins.importers._common import (
    dig,
    first_non_space,
    load_json,
    openai_message,
    read_head,
    read_head_tail,
    require,
    require_object,
    search,
    stem_of,
)

NAME = "swe-agent"


class SweAgentImporter:
    """Reads SWE-agent ``*.traj`` JSON files."""

    name = NAME
    priority = 40

    def sniff(self, path: Path) -> bool:
        head = read_head(path)
        if first_non_space(head) != b"{":
            return False
        if search(rb'^\s*\{\s*"(?:trajectory|history)"\s*:\s*\[', head.lstrip(b"\xef\xbb\xbf")):
            return True
        if path.name.endswith(".traj"):
            # SWE-agent files end with info/replay_config/environment, never a format tag.
            return search(rb'"history"\s*:\s*\[', read_head_tail(path)) or search(
                rb'"(?:replay_config|environment)"\s*:', read_head_tail(path)
            )
        return False

    def load(self, path: Path) -> ImportedSession:
        doc = require_object(path, load_json(path), "top level")
        history = require(path, doc, "history", list, "top level")
        builder = SessionBuilder(path, NAME)
        model = dig(doc, "replay_config", "agent", "model", "name")
        builder.model = model if isinstance(model, str) else ""
        for index, raw in enumerate(history):
            position = f"history[{index}]"
            data = require_object(path, raw, position)
            wire: dict[str, Any] = {
                "role": require(path, data, "role", str, position),
                "content": data.get("content"),
            }
            if data.get("tool_calls"):
                wire["tool_calls"] = data["tool_calls"]
            if wire["role"] == "tool":
                ids = data.get("tool_call_ids") or (
                    [data["tool_call_id"]] if data.get("tool_call_id") else []
                )
                if not isinstance(ids, list) or not ids or not isinstance(ids[0], str):
                    raise builder.error(
                        position, "tool message has no 'tool_call_ids' (expected a list of ids)"
                    )
                wire["tool_call_id"] = ids[0]
            builder.add(openai_message(path, wire, position), position)
        return builder.build(stem_of(path))


def _factory(_context: StrategyContext) -> SweAgentImporter:
    return SweAgentImporter()


@hookimpl
def ctxfold_importers() -> list[StrategySpec]:
    """Register the ``swe-agent`` importer."""
    return [
        StrategySpec(
            name=NAME,
            factory=_factory,
            description="SWE-agent .traj (history[] with tool calls)",
        )
    ]
