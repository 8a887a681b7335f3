"""Importer ``claude-code-jsonl``: a native Claude Code session file.

``~/.claude/projects/<project>/<session-id>.jsonl``: one record per line with ``type``
(``user``/``assistant``/``summary``/``system``/...), ``uuid``, ``parentUuid``,
``sessionId``, ``requestId`` and ``message`` (Anthropic ``role`` + ``content`` string or
blocks: ``text``, ``thinking``, ``tool_use {id,name,input}``, ``tool_result
{tool_use_id,content}``; assistant messages carry ``id``, ``model`` and ``usage``).
Mapping: :mod:`._claude` (assistant records merge by ``requestId``, else ``message.id``).

Not messages: ``summary``, ``system`` and other metadata records, and ``isSidechain``
records (sub-agent conversations with their own context). A record whose ``uuid`` was already
seen (resumed sessions repeat history) is skipped. Read one line at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ctxfold.importing import SessionBuilder, importer_error
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import StrategyContext, StrategySpec
from ctxfold.kernel.sessions import ImportedSession
from ctxfold.kernel.types import Usage
from ctxfold.plugins.importers._claude import Block, Record, add_records, usage_from_claude
from ctxfold.plugins.importers._common import (
    as_int,
    head_lines,
    iter_jsonl,
    read_head,
    require,
    require_object,
    search,
    stem_of,
    text_of,
)

NAME = "claude-code-jsonl"
_MESSAGE_TYPES = ("user", "assistant")
_KNOWN_TYPES = (*_MESSAGE_TYPES, "summary", "system")
_ID_KEYS = ("sessionId", "leafUuid", "parentUuid", "uuid")


def _usage(data: Any) -> Usage | None:
    if not isinstance(data, Mapping):
        return None
    return usage_from_claude(
        as_int(data.get("input_tokens")), as_int(data.get("output_tokens")),
        as_int(data.get("cache_creation_input_tokens")),
        as_int(data.get("cache_read_input_tokens")),
    )


def _blocks(path: Path, content: Any, position: str) -> tuple[Block, ...]:
    if isinstance(content, str):
        return (Block("text", text=content),)
    if not isinstance(content, list):
        raise importer_error(path, position, "'message.content' must be a string or a list")
    blocks: list[Block] = []
    for i, raw in enumerate(content):
        where = f"{position} content[{i}]"
        block = require_object(path, raw, where)
        kind = block.get("type")
        if kind == "text":
            blocks.append(Block("text", text=text_of(block.get("text"))))
        elif kind == "thinking":
            blocks.append(Block("thinking", text=text_of(block.get("thinking"))))
        elif kind == "tool_use":
            call_id = require(path, block, "id", str, where)
            name = require(path, block, "name", str, where)
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
            blocks.append(Block("tool_use", id=call_id, name=name, arguments=arguments))
        elif kind == "tool_result":
            call_id = require(path, block, "tool_use_id", str, where)
            blocks.append(Block("tool_result", id=call_id, text=text_of(block.get("content"))))
        # images, redacted thinking and unknown blocks carry no text for the transcript
    return tuple(blocks)


class ClaudeCodeJsonlImporter:
    """Reads native Claude Code ``<session-id>.jsonl`` files."""

    name = NAME
    priority = 25

    def sniff(self, path: Path) -> bool:
        head = read_head(path)
        for obj in head_lines(head):
            if (
                isinstance(obj, dict)
                and obj.get("type") in _KNOWN_TYPES
                and any(key in obj for key in _ID_KEYS)
            ):
                return True
        # A first line longer than the sniff window: look for the record keys themselves.
        return path.suffix == ".jsonl" and search(
            rb'^\s*\{[^\n]*"type"\s*:\s*"(?:user|assistant|summary)"[^\n]*"sessionId"\s*:', head
        )

    def load(self, path: Path) -> ImportedSession:
        builder = SessionBuilder(path, NAME)
        meta: dict[str, str] = {}
        add_records(builder, self._records(path, meta))
        builder.model = meta.get("model", "")
        return builder.build(meta.get("sessionId") or stem_of(path))

    def _records(self, path: Path, meta: dict[str, str]) -> Iterator[Record]:
        seen: set[str] = set()
        for lineno, raw in iter_jsonl(path):
            position = f"line {lineno}"
            obj = require_object(path, raw, position)
            kind = obj.get("type")
            if kind not in _MESSAGE_TYPES or obj.get("isSidechain"):
                continue
            uuid = obj.get("uuid")
            if isinstance(uuid, str) and uuid:
                if uuid in seen:
                    continue
                seen.add(uuid)
            if isinstance(obj.get("sessionId"), str):
                meta.setdefault("sessionId", obj["sessionId"])
            message = require(path, obj, "message", dict, position)
            if "content" not in message:
                raise importer_error(path, position, "missing required field 'message.content'")
            blocks = _blocks(path, message["content"], position)
            if kind == "user":
                yield Record(kind="user", position=position, blocks=blocks)
                continue
            model = message.get("model")
            if isinstance(model, str) and model and not model.startswith("<"):
                meta.setdefault("model", model)
            group = obj.get("requestId") or message.get("id")
            yield Record(
                kind="assistant",
                position=position,
                blocks=blocks,
                group=group if isinstance(group, str) and group else None,
                usage=_usage(message.get("usage")),
            )


def _factory(_context: StrategyContext) -> ClaudeCodeJsonlImporter:
    return ClaudeCodeJsonlImporter()


@hookimpl
def ctxfold_importers() -> list[StrategySpec]:
    """Register the ``claude-code-jsonl`` importer."""
    return [
        StrategySpec(
            name=NAME,
            factory=_factory,
            description="native Claude Code session JSONL (~/.claude/projects/*/<id>.jsonl)",
        )
    ]
