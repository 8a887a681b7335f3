"""Importer ``mini-swe-agent-v2``: mini-swe-agent 2.x trajectories with native tool calls.

``trajectory_format: "mini-swe-agent-1.1"`` (and later 1.x/2.x tags). Messages are already
OpenAI-shaped: ``role``, ``content``, ``tool_calls`` (``index`` dropped), ``tool_call_id`` and
``reasoning_content`` are kept; ``extra``, ``function_call`` and ``provider_specific_fields``
are dropped (transcripts README §2).

The final ``role: "exit"`` message carries the submission that the last ``bash`` call
(``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && ...``) produced. With the default option
``exit_message = "tool"`` it becomes the ``tool`` reply to that otherwise unanswered call;
with ``"drop"`` (or when no call is open) it is dropped.

Usage: ``extra.response.usage`` on assistant messages, incl. DeepSeek's
``prompt_cache_hit_tokens`` / ``prompt_cache_miss_tokens``.
"""

from __future__ import annotations

from pathlib import Path

from ctxfold.importing import SessionBuilder, importer_error
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import ImporterOptions, StrategyContext, StrategySpec
from ctxfold.kernel.sessions import ImportedSession
from ctxfold.kernel.types import Message
from ctxfold.plugins.importers._common import (
    dig,
    load_json,
    openai_message,
    read_head_tail,
    require,
    require_object,
    search,
    stem_of,
    text_of,
    usage_from_openai,
)

NAME = "mini-swe-agent-v2"
EXIT_MODES = ("tool", "drop")
_KEEP = ("role", "content", "tool_call_id", "reasoning_content", "name")


class MiniSweAgentV2Importer:
    """Reads ``*.traj.json`` files written by mini-swe-agent 2.x (tool calls)."""

    name = NAME
    priority = 31

    def __init__(self, exit_message: str = "tool") -> None:
        if exit_message not in EXIT_MODES:
            raise importer_error(
                "importer option exit_message",
                "",
                f"invalid value {exit_message!r}",
                f"allowed: {', '.join(EXIT_MODES)}",
            )
        self.exit_message = exit_message

    def sniff(self, path: Path) -> bool:
        return search(
            rb'"trajectory_format"\s*:\s*"mini-swe-agent-(?:1\.[1-9][0-9]*|2(?:\.[0-9]+)*)"',
            read_head_tail(path),
        )

    def load(self, path: Path) -> ImportedSession:
        doc = require_object(path, load_json(path), "top level")
        raw_messages = require(path, doc, "messages", list, "top level")
        builder = SessionBuilder(path, NAME)
        builder.model = str(dig(doc, "info", "config", "model", "model_name") or "")
        open_calls: list[str] = []  # calls of the latest assistant message not yet answered
        for index, raw in enumerate(raw_messages):
            position = f"messages[{index}]"
            data = require_object(path, raw, position)
            role = require(path, data, "role", str, position)
            if role == "exit":
                if self.exit_message == "tool" and open_calls:
                    content = text_of(data.get("content"))
                    builder.add(
                        Message(role="tool", content=content, tool_call_id=open_calls[-1]),
                        position,
                    )
                    open_calls.clear()
                continue
            wire = {key: data[key] for key in _KEEP if data.get(key) is not None}
            if data.get("tool_calls"):
                wire["tool_calls"] = data["tool_calls"]
            message = openai_message(path, wire, position)
            usage = None
            if message.role == "assistant":
                open_calls = [call.id for call in message.tool_calls]
                usage = usage_from_openai(dig(data, "extra", "response", "usage"))
            elif message.role == "tool" and message.tool_call_id in open_calls:
                open_calls.remove(message.tool_call_id)
            builder.add(message, position, usage)
        return builder.build(str(doc.get("instance_id") or stem_of(path)))


def _factory(context: StrategyContext[ImporterOptions]) -> MiniSweAgentV2Importer:
    return MiniSweAgentV2Importer(context.options.exit_message)


@hookimpl
def ctxfold_importers() -> list[StrategySpec]:
    """Register the ``mini-swe-agent-v2`` importer."""
    return [
        StrategySpec(
            name=NAME,
            factory=_factory,
            description="mini-swe-agent 2.x .traj.json (native tool calls; exit -> tool reply)",
        )
    ]
