"""Importer ``openhands-sdk-log``: an OpenHands SDK (LiteLLM) completion log.

One JSON object per LLM call: ``messages[]`` is the exact OpenAI request (content as text
part lists; tool messages also carry ``name``), ``tools[]`` the function schemas, and
``response`` the ``ChatCompletion``. ``response.choices[0].message`` is appended as the last
assistant turn, with ``response.usage`` as its reported usage (transcripts README §6).
"""

from __future__ import annotations

from pathlib import Path

from ctxfold.importing import SessionBuilder
from ctxfold.interop.chat import tool_schema_from_openai
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import StrategyContext, StrategySpec
from ctxfold.kernel.sessions import ImportedSession
from ctxfold.plugins.importers._common import (
    dig,
    first_non_space,
    load_json,
    openai_message,
    read_head_tail,
    require,
    require_object,
    stem_of,
    usage_from_openai,
)

NAME = "openhands-sdk-log"


class OpenHandsSdkLogImporter:
    """Reads OpenHands SDK ``llm-logs`` completion JSON files."""

    name = NAME
    priority = 50

    def sniff(self, path: Path) -> bool:
        data = read_head_tail(path)
        if first_non_space(data) != b"{":
            return False
        return (
            b'"messages"' in data
            and b'"response"' in data
            and any(key in data for key in (b'"latency_sec"', b'"kwargs"', b'"context_window"'))
        )

    def load(self, path: Path) -> ImportedSession:
        doc = require_object(path, load_json(path), "top level")
        messages = require(path, doc, "messages", list, "top level")
        builder = SessionBuilder(path, NAME)
        tools = doc.get("tools") or dig(doc, "kwargs", "tools") or []
        for index, tool in enumerate(tools):
            builder.tools.append(
                tool_schema_from_openai(require_object(path, tool, f"tools[{index}]"))
            )
        for index, raw in enumerate(messages):
            position = f"messages[{index}]"
            data = require_object(path, raw, position)
            builder.add(openai_message(path, data, position), position)
        response = require(path, doc, "response", dict, "top level")
        choices = require(path, response, "choices", list, "response")
        if not choices:
            raise builder.error("response.choices", "empty list (no response message)")
        position = "response.choices[0].message"
        reply = require_object(path, dig(choices[0], "message"), position)
        builder.add(openai_message(path, reply, position), position,
                    usage_from_openai(response.get("usage")))
        builder.model = str(response.get("model") or dig(doc, "kwargs", "model") or "")
        return builder.build(stem_of(path))


def _factory(_context: StrategyContext) -> OpenHandsSdkLogImporter:
    return OpenHandsSdkLogImporter()


@hookimpl
def ctxfold_importers() -> list[StrategySpec]:
    """Register the ``openhands-sdk-log`` importer."""
    return [
        StrategySpec(
            name=NAME,
            factory=_factory,
            description="OpenHands SDK LLM completion log (request messages + response)",
        )
    ]
