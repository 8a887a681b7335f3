"""Shared mapping of Claude Code records to canonical messages (XML export and JSONL).

Both formats hold one record per content block of a model response; the importers parse
their syntax into :class:`Record` values and :func:`add_records` applies the mapping of
the transcripts README §4:

* consecutive ``assistant`` records with the same group key (request id, else message id)
  merge into one assistant message: ``text`` → content, ``thinking`` → reasoning_content,
  ``tool_use`` → tool calls (``arguments`` = JSON of ``input``); the usage of the last record
  of the group is the message's reported usage;
* a ``user`` record's ``tool_result`` blocks become ``tool`` messages (first, so they follow
  the calls) and its text becomes one ``user`` message;
* other records (``summary``, ``system``, metadata) are not messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import attrs

from ctxfold.importing import SessionBuilder
from ctxfold.kernel.types import Message, ToolCall, Usage

BlockType = Literal["text", "thinking", "tool_use", "tool_result"]


@attrs.frozen
class Block:
    """One content block: ``text`` for text/thinking/tool results; call fields for tool use."""

    type: BlockType
    text: str = ""
    id: str = ""
    name: str = ""
    arguments: str = ""


@attrs.frozen
class Record:
    """One Claude Code record reduced to what the mapping needs."""

    kind: Literal["user", "assistant"]
    position: str
    blocks: tuple[Block, ...] = ()
    group: str | None = None
    usage: Usage | None = None


def usage_from_claude(
    input_tokens: int, output_tokens: int, cache_creation: int, cache_read: int
) -> Usage:
    """Anthropic usage → :class:`Usage`: the prompt is input + cache writes + cache reads."""
    return Usage(
        prompt_tokens=input_tokens + cache_creation + cache_read,
        completion_tokens=output_tokens,
        cache_hit_tokens=cache_read,
        cache_miss_tokens=input_tokens + cache_creation,
    )


class _Group:
    def __init__(self, record: Record) -> None:
        self.key = record.group
        self.position = record.position
        self.texts: list[str] = []
        self.thinking: list[str] = []
        self.calls: list[ToolCall] = []
        self.usage: Usage | None = None

    def absorb(self, record: Record) -> None:
        for block in record.blocks:
            if block.type == "text" and block.text:
                self.texts.append(block.text)
            elif block.type == "thinking" and block.text:
                self.thinking.append(block.text)
            elif block.type == "tool_use":
                self.calls.append(ToolCall(id=block.id, name=block.name, arguments=block.arguments))
        if record.usage is not None:
            self.usage = record.usage

    def emit(self, builder: SessionBuilder) -> None:
        if not (self.texts or self.thinking or self.calls):
            return
        message = Message(
            role="assistant",
            content="\n".join(self.texts),
            tool_calls=tuple(self.calls),
            reasoning_content="\n".join(self.thinking) if self.thinking else None,
        )
        builder.add(message, self.position, self.usage)


def add_records(builder: SessionBuilder, records: Iterable[Record]) -> None:
    """Map ``records`` (in file order) onto ``builder``."""
    group: _Group | None = None
    for record in records:
        if record.kind == "assistant":
            if group is None or record.group is None or record.group != group.key:
                if group is not None:
                    group.emit(builder)
                group = _Group(record)
            group.absorb(record)
            continue
        if group is not None:
            group.emit(builder)
            group = None
        texts = []
        for block in record.blocks:
            if block.type == "tool_result":
                builder.add(
                    Message(role="tool", content=block.text, tool_call_id=block.id),
                    record.position,
                )
            elif block.type == "text":
                texts.append(block.text)
        if texts:
            builder.add(Message(role="user", content="\n".join(texts)), record.position)
    if group is not None:
        group.emit(builder)
