"""Importer ``mini-swe-agent-v1``: mini-swe-agent 1.x trajectories with text actions.

``trajectory_format: "mini-swe-agent-1"``. Messages carry only ``role`` and ``content``;
the action is the single ```` ```bash ```` block of an assistant message and its output
comes back as the next ``user`` message. Mapping (transcripts README §3):

* an assistant message with exactly one bash block gets a synthetic tool call
  ``call_NNNN`` (numbered from 0001 in order) named ``bash`` with
  ``arguments = json({"command": block.strip()})``; its full text stays the content;
* the next ``user`` message becomes the ``tool`` reply to that call;
* a ``user`` message after an assistant with zero or several blocks is format-error
  feedback and stays ``user``; the last user message (the submission diff) answers the
  submit command like any other observation.

Usage: ``extra.response.usage`` on assistant messages.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ctxfold.importing import SessionBuilder
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import StrategyContext, StrategySpec
from ctxfold.kernel.sessions import ImportedSession
from ctxfold.kernel.types import Message, ToolCall
from ctxfold.plugins.importers._common import (
    dig,
    load_json,
    read_head_tail,
    require,
    require_object,
    search,
    stem_of,
    text_of,
    usage_from_openai,
)

NAME = "mini-swe-agent-v1"
#: mini-swe-agent's default ``action_regex``.
ACTION_RE = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_ROLES = ("system", "user", "assistant")


class MiniSweAgentV1Importer:
    """Reads ``*.traj.json`` files written by mini-swe-agent 1.x (text actions)."""

    name = NAME
    priority = 30

    def sniff(self, path: Path) -> bool:
        return search(rb'"trajectory_format"\s*:\s*"mini-swe-agent-1"', read_head_tail(path))

    def load(self, path: Path) -> ImportedSession:
        doc = require_object(path, load_json(path), "top level")
        raw_messages = require(path, doc, "messages", list, "top level")
        builder = SessionBuilder(path, NAME)
        builder.model = str(dig(doc, "info", "config", "model", "model_name") or "")
        pending: str | None = None  # synthetic call id waiting for its observation
        calls = 0
        for index, raw in enumerate(raw_messages):
            position = f"messages[{index}]"
            data = require_object(path, raw, position)
            role = require(path, data, "role", str, position)
            if role not in _ROLES:
                raise builder.error(
                    position, f"unknown role {role!r} (expected {', '.join(_ROLES)})"
                )
            content = text_of(require(path, data, "content", (str, list), position))
            if role == "assistant":
                blocks = ACTION_RE.findall(content)
                tool_calls: tuple[ToolCall, ...] = ()
                pending = None
                if len(blocks) == 1:
                    calls += 1
                    pending = f"call_{calls:04d}"
                    arguments = json.dumps({"command": blocks[0].strip()})
                    tool_calls = (ToolCall(id=pending, name="bash", arguments=arguments),)
                usage = usage_from_openai(dig(data, "extra", "response", "usage"))
                builder.add(
                    Message(role="assistant", content=content, tool_calls=tool_calls),
                    position,
                    usage,
                )
            elif role == "user" and pending is not None:
                builder.add(Message(role="tool", content=content, tool_call_id=pending), position)
                pending = None
            else:
                builder.add(Message(role=role, content=content), position)
                pending = None
        return builder.build(str(doc.get("instance_id") or stem_of(path)))


def _factory(_context: StrategyContext) -> MiniSweAgentV1Importer:
    return MiniSweAgentV1Importer()


@hookimpl
def ctxfold_importers() -> list[StrategySpec]:
    """Register the ``mini-swe-agent-v1`` importer."""
    return [
        StrategySpec(
            name=NAME,
            factory=_factory,
            description="mini-swe-agent 1.x .traj.json (text ```bash actions, synthetic call ids)",
        )
    ]
