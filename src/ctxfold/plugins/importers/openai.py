"""Importer ``openai``: OpenAI chat-format messages.

Accepted shapes: a JSON list of messages; a JSON object with ``messages`` (and optional
``tools``, OpenAI function schemas); or JSONL with one message per line (which includes
ctxfold's own transcript lines). A message may carry a ``usage`` object (OpenAI usage
fields), reported as the message's usage. This is the generic catch-all, so it sniffs last.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ctxfold.importing import SessionBuilder, importer_error
from ctxfold.interop.chat import tool_schema_from_openai
from ctxfold.kernel.codec import message_from_dict
from ctxfold.kernel.errors import ImporterError
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import StrategyContext, StrategySpec
from ctxfold.kernel.sessions import ImportedSession
from ctxfold.kernel.types import Message
from ctxfold.plugins.importers._common import (
    first_non_space,
    head_lines,
    iter_jsonl,
    load_json,
    openai_message,
    read_head,
    require_object,
    search,
    stem_of,
    usage_from_openai,
)

NAME = "openai"


def _is_native_line(data: Mapping[str, Any]) -> bool:
    # ctxfold's store writes tool calls as {"id","name","arguments"}, not OpenAI's
    # {"id","function":{...}}; such lines round-trip through the cattrs converter.
    calls = data.get("tool_calls")
    return isinstance(calls, list) and bool(calls) and all(
        isinstance(c, Mapping) and "function" not in c and "name" in c for c in calls
    )


class OpenAIImporter:
    """Reads OpenAI chat-format JSON, JSON ``{"messages": ...}`` or JSONL."""

    name = NAME
    priority = 1000

    def sniff(self, path: Path) -> bool:
        head = read_head(path)
        first = first_non_space(head)
        if first == b"[":
            return search(rb'"role"\s*:', head)
        if first != b"{":
            return False
        lines = head_lines(head, limit=1)
        if lines and isinstance(lines[0], dict) and "role" in lines[0]:
            return True
        return search(rb'"messages"\s*:\s*\[', head)

    def load(self, path: Path) -> ImportedSession:
        builder = SessionBuilder(path, NAME)
        if path.suffix == ".jsonl":
            self._add_all(builder, ((f"line {n}", obj) for n, obj in iter_jsonl(path)))
            return builder.build(stem_of(path))
        try:
            doc = load_json(path)
        except ImporterError:
            # A .json file holding JSONL ("Extra data" after the first object) is still ours.
            if head_lines(read_head(path), limit=2)[1:]:
                self._add_all(builder, ((f"line {n}", obj) for n, obj in iter_jsonl(path)))
                return builder.build(stem_of(path))
            raise
        if isinstance(doc, list):
            items: Iterable[tuple[str, Any]] = ((f"[{i}]", m) for i, m in enumerate(doc))
        else:
            doc = require_object(path, doc, "top level")
            messages = doc.get("messages")
            if not isinstance(messages, list):
                raise builder.error(
                    "top level", "expected a list of messages or an object with a 'messages' list"
                )
            items = ((f"messages[{i}]", m) for i, m in enumerate(messages))
            tools = doc.get("tools") or []
            if not isinstance(tools, list):
                raise builder.error("tools", f"must be a list, got {type(tools).__name__}")
            for i, tool in enumerate(tools):
                tool = require_object(path, tool, f"tools[{i}]")
                builder.tools.append(tool_schema_from_openai(tool, where=f"tools[{i}]"))
            if isinstance(doc.get("model"), str):
                builder.model = doc["model"]
        self._add_all(builder, items)
        return builder.build(stem_of(path))

    @staticmethod
    def _add_all(builder: SessionBuilder, items: Iterable[tuple[str, Any]]) -> None:
        for position, raw in items:
            data = require_object(builder.source, raw, position)
            message = _message(builder.source, data, position)
            builder.add(message, position, usage_from_openai(data.get("usage")))


def _message(path: Path, data: Mapping[str, Any], position: str) -> Message:
    if _is_native_line(data):
        try:
            return message_from_dict(data)
        except Exception as exc:  # cattrs raises several exception types
            raise importer_error(path, position, f"invalid message: {exc}") from None
    return openai_message(path, data, position)


def _factory(_context: StrategyContext) -> OpenAIImporter:
    return OpenAIImporter()


@hookimpl
def ctxfold_importers() -> list[StrategySpec]:
    """Register the ``openai`` importer."""
    return [
        StrategySpec(
            name=NAME,
            factory=_factory,
            description="OpenAI chat messages: JSON list, {messages, tools} object, or JSONL",
        )
    ]


__all__ = ["OpenAIImporter", "ctxfold_importers"]
