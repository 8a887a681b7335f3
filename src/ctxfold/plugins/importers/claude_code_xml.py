"""Importer ``claude-code-xml``: a Claude Code session exported to XML by cctrace.

Namespace ``https://claude.ai/session-export/v1``; root ``<claude-session>`` with
``<metadata>`` and ``<messages>``, one ``<message>`` per Claude Code JSONL record
(``<event-type>`` user/assistant/summary, ``<request-id>``, ``<content>`` with ``<text>``,
``<thinking>``, ``<tool-use id name><input>JSON</input></tool-use>`` and
``<tool-result tool-use-id>``, ``<usage>``). Mapping: :mod:`._claude`. The file is read
with ``iterparse`` and each ``<message>`` is cleared after use, so memory stays bounded.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

from ctxfold.importing import SessionBuilder, importer_error
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import StrategyContext, StrategySpec
from ctxfold.kernel.sessions import ImportedSession
from ctxfold.kernel.types import Usage
from ctxfold.plugins.importers._claude import Block, Record, add_records, usage_from_claude
from ctxfold.plugins.importers._common import read_head, stem_of

NAME = "claude-code-xml"


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child(element: ET.Element, name: str) -> ET.Element | None:
    for child in element:
        if _local(child.tag) == name:
            return child
    return None


def _child_text(element: ET.Element, name: str) -> str:
    child = _child(element, name)
    return (child.text or "").strip() if child is not None else ""


def _usage(element: ET.Element | None) -> Usage | None:
    if element is None:
        return None

    def num(name: str) -> int:
        text = _child_text(element, name)
        return int(text) if text.isdigit() else 0

    return usage_from_claude(
        num("input-tokens"), num("output-tokens"),
        num("cache-creation-tokens"), num("cache-read-tokens"),
    )


def _blocks(path: Path, content: ET.Element | None, position: str) -> tuple[Block, ...]:
    blocks: list[Block] = []
    for child in content if content is not None else ():
        tag = _local(child.tag)
        if tag == "text":
            blocks.append(Block("text", text=child.text or ""))
        elif tag == "thinking":
            blocks.append(Block("thinking", text=child.text or ""))
        elif tag == "tool-use":
            call_id, name = child.get("id"), child.get("name")
            if not call_id or not name:
                raise importer_error(path, position, "<tool-use> needs 'id' and 'name' attributes")
            raw_input = _child(child, "input")
            text = (raw_input.text or "") if raw_input is not None else ""
            try:
                arguments = json.dumps(json.loads(text) if text.strip() else {},
                                       ensure_ascii=False)
            except ValueError as exc:
                raise importer_error(
                    path, f"{position} <tool-use id={call_id!r}>", f"<input> is not JSON: {exc}"
                ) from None
            blocks.append(Block("tool_use", id=call_id, name=name, arguments=arguments))
        elif tag == "tool-result":
            call_id = child.get("tool-use-id")
            if not call_id:
                raise importer_error(path, position, "<tool-result> has no 'tool-use-id'")
            blocks.append(Block("tool_result", id=call_id, text="".join(child.itertext())))
    return tuple(blocks)


class ClaudeCodeXmlImporter:
    """Reads cctrace ``conversation_full.xml`` exports."""

    name = NAME
    priority = 20

    def sniff(self, path: Path) -> bool:
        # The export's root element must open the document (after an XML declaration or
        # comments); a README that merely mentions the tag is not an export.
        head = read_head(path, 4096).lstrip(b"\xef\xbb\xbf").lstrip()
        head = re.sub(rb"^(<\?xml[^>]*\?>\s*|<!--.*?-->\s*)*", b"", head, flags=re.S)
        return head.startswith(b"<claude-session")

    def load(self, path: Path) -> ImportedSession:
        builder = SessionBuilder(path, NAME)
        meta: dict[str, str] = {}
        add_records(builder, self._records(path, meta))
        builder.model = meta.get("model", "")
        return builder.build(meta.get("session-id") or stem_of(path))

    def _records(self, path: Path, meta: dict[str, str]) -> Iterator[Record]:
        index = 0
        try:
            for _event, element in ET.iterparse(path, events=("end",)):
                tag = _local(element.tag)
                if tag in ("session-id", "model") and tag not in meta and element.text:
                    meta[tag] = element.text.strip()
                if tag != "message":
                    continue
                index += 1
                uuid = element.get("uuid") or ""
                position = f"<message> #{index}" + (f" (uuid {uuid})" if uuid else "")
                kind = _child_text(element, "event-type") or _child_text(element, "role")
                if kind in ("user", "assistant"):
                    yield Record(
                        kind="user" if kind == "user" else "assistant",
                        position=position,
                        blocks=_blocks(path, _child(element, "content"), position),
                        group=_child_text(element, "request-id") or None,
                        usage=_usage(_child(element, "usage")) if kind == "assistant" else None,
                    )
                elif not kind:
                    raise importer_error(path, position, "missing <event-type>")
                element.clear()  # keep memory bounded on large exports
        except ET.ParseError as exc:
            line, column = exc.position
            raise importer_error(
                path, f"line {line} column {column}", f"invalid XML: {exc.msg}",
                "the export is damaged or truncated; export the session again",
            ) from None
        except OSError as exc:
            raise importer_error(path, "", f"cannot read: {exc.strerror}", "check the path") \
                from None


def _factory(_context: StrategyContext) -> ClaudeCodeXmlImporter:
    return ClaudeCodeXmlImporter()


@hookimpl
def ctxfold_importers() -> list[StrategySpec]:
    """Register the ``claude-code-xml`` importer."""
    return [
        StrategySpec(
            name=NAME,
            factory=_factory,
            description="Claude Code session exported to XML by cctrace",
        )
    ]
