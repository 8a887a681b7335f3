"""Importer ``openhands-v1``: an OpenHands V1 (Software Agent SDK) conversation event store.

Layout: ``<conv>/event_service/events/event-NNNNN-<uuid>.json``, one event per file,
ordered by ``NNNNN``. The path may be the conversation directory, ``event_service`` or
``events``. Mapping (transcripts README §1):

* ``SystemPromptEvent`` → ``system`` (``system_prompt.text``); its ``tools`` are the schemas;
* ``MessageEvent`` → ``llm_message.role`` with the text parts (and ``extended_content``) joined;
* ``ActionEvent`` → ``assistant``: content = joined ``thought`` texts, one tool call
  (``tool_call_id`` + ``tool_call.function``); consecutive actions sharing an
  ``llm_response_id`` form one message (parallel calls);
* ``ObservationEvent`` → ``tool``: ``observation.output``, else its ``error`` text, else
  ``.content`` (Think, TaskTracker), else ``.message`` (Finish). ``old_content`` /
  ``new_content`` (file snapshots never sent to the model) are ignored;
  ``AgentErrorEvent`` and ``UserRejectObservation`` also become ``tool`` messages;
* ``Condensation`` and every other kind are not messages (the canonical transcript keeps
  everything the condenser forgot).

Usage: ``base_state.json`` → ``stats.service_to_metrics.default.token_usages[]``, matched to
the assistant message by ``response_id == llm_response_id``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctxfold.importing import SessionBuilder
from ctxfold.interop.chat import tool_schema_from_openai
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import StrategyContext, StrategySpec
from ctxfold.kernel.sessions import ImportedSession
from ctxfold.kernel.types import Message, ToolCall, Usage
from ctxfold.plugins.importers._common import (
    as_int,
    dig,
    load_json,
    require,
    require_object,
    text_of,
)

NAME = "openhands-v1"
EVENT_RE = re.compile(r"^event-(\d+)-.*\.json$")
_TOOL_EVENTS = ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation")


def events_dir(path: Path) -> Path | None:
    """The ``events`` directory for a conversation, ``event_service`` or ``events`` path."""
    if not path.is_dir():
        return None
    for candidate in (path / "event_service" / "events", path / "events", path):
        if candidate.is_dir() and any(EVENT_RE.match(p.name) for p in candidate.iterdir()):
            return candidate
    return None


def _event_files(directory: Path) -> list[Path]:
    numbered = []
    for entry in directory.iterdir():
        match = EVENT_RE.match(entry.name)
        if match and entry.is_file():
            numbered.append((int(match.group(1)), entry.name, entry))
    return [entry for _n, _name, entry in sorted(numbered)]


def _observation_text(event: Mapping[str, Any], kind: str) -> str:
    if kind == "AgentErrorEvent":
        return text_of(event.get("error"))
    if kind == "UserRejectObservation":
        return text_of(event.get("rejection_reason")) or "The user rejected this action."
    observation = event.get("observation")
    if not isinstance(observation, Mapping):
        return ""
    for key in ("output", "error", "content", "message"):
        value = observation.get(key)
        if isinstance(value, (str, list)) and text_of(value):
            return text_of(value)
    return ""


def _token_usages(state: Any) -> dict[str, Usage]:
    usages = dig(state, "stats", "service_to_metrics", "default", "token_usages")
    out: dict[str, Usage] = {}
    for entry in usages if isinstance(usages, list) else ():
        if isinstance(entry, Mapping) and isinstance(entry.get("response_id"), str):
            prompt = as_int(entry.get("prompt_tokens"))
            hit = as_int(entry.get("cache_read_tokens"))
            out[entry["response_id"]] = Usage(
                prompt_tokens=prompt,
                completion_tokens=as_int(entry.get("completion_tokens")),
                cache_hit_tokens=hit,
                cache_miss_tokens=max(prompt - hit, 0),
                reasoning_tokens=as_int(entry.get("reasoning_tokens")),
            )
    return out


class OpenHandsV1Importer:
    """Reads an OpenHands V1 conversation event directory."""

    name = NAME
    priority = 10

    def sniff(self, path: Path) -> bool:
        return events_dir(path) is not None

    def load(self, path: Path) -> ImportedSession:
        directory = events_dir(path)
        if directory is None:
            raise SessionBuilder(path, NAME).error(
                "", "no event-NNNNN-*.json files found",
                "pass the conversation directory, its event_service or its events directory",
            )
        service = directory.parent if directory.parent.name == "event_service" else None
        base_state = service / "base_state.json" if service else None
        state = load_json(base_state) if base_state and base_state.is_file() else None
        usages = _token_usages(state)
        builder = SessionBuilder(path, NAME)
        model = dig(state, "agent", "llm", "model")
        builder.model = model if isinstance(model, str) else ""
        group: str | None = None  # llm_response_id of the assistant message being built
        for file in _event_files(directory):
            position = f"event file {file.name}"
            event = require_object(file, load_json(file), "top level")
            kind = require(file, event, "kind", str, "top level")
            if kind == "SystemPromptEvent":
                builder.add(Message(role="system", content=text_of(
                    dig(event, "system_prompt", "text"))), position)
                for i, tool in enumerate(event.get("tools") or ()):
                    builder.tools.append(tool_schema_from_openai(
                        require_object(file, tool, f"tools[{i}]")))
                group = None
            elif kind == "MessageEvent":
                llm = require(file, event, "llm_message", dict, "top level")
                role = require(file, llm, "role", str, "llm_message")
                if role not in ("system", "user", "assistant"):
                    raise builder.error(position, f"unknown llm_message.role {role!r}")
                parts = [text_of(llm.get("content")), text_of(event.get("extended_content"))]
                reasoning = llm.get("reasoning_content")
                builder.add(Message(
                    role=role, content="\n".join(p for p in parts if p),
                    reasoning_content=reasoning if isinstance(reasoning, str) else None,
                ), position)
                group = None
            elif kind == "ActionEvent":
                group = self._add_action(builder, file, event, position, group, usages)
            elif kind in _TOOL_EVENTS:
                call_id = require(file, event, "tool_call_id", str, "top level")
                builder.add(Message(role="tool", content=_observation_text(event, kind),
                                    tool_call_id=call_id), position)
                group = None
        return builder.build(directory.parent.parent.name if service else directory.name)

    @staticmethod
    def _add_action(
        builder: SessionBuilder, file: Path, event: Mapping[str, Any], position: str,
        group: str | None, usages: Mapping[str, Usage],
    ) -> str | None:
        call = require(file, event, "tool_call", dict, "top level")
        function = require(file, call, "function", dict, "tool_call")
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        call_id = event.get("tool_call_id") or call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise builder.error(position, "missing required field 'tool_call_id'")
        tool_call = ToolCall(id=call_id, name=str(function.get("name", "")), arguments=arguments)
        response_id = event.get("llm_response_id")
        response_id = response_id if isinstance(response_id, str) and response_id else None
        last = builder.messages[-1] if builder.messages else None
        if response_id is not None and response_id == group and last and last.role == "assistant":
            # Parallel calls of one response: extend the message built from the first action.
            builder.messages[-1] = Message(
                role="assistant", content=last.content,
                tool_calls=(*last.tool_calls, tool_call),
                reasoning_content=last.reasoning_content,
            )
            return group
        reasoning = event.get("reasoning_content")
        builder.add(Message(
            role="assistant", content=text_of(event.get("thought")), tool_calls=(tool_call,),
            reasoning_content=reasoning if isinstance(reasoning, str) and reasoning else None,
        ), position, usages.get(response_id) if response_id else None)
        return response_id


def _factory(_context: StrategyContext) -> OpenHandsV1Importer:
    return OpenHandsV1Importer()


@hookimpl
def ctxfold_importers() -> list[StrategySpec]:
    """Register the ``openhands-v1`` importer."""
    return [
        StrategySpec(
            name=NAME,
            factory=_factory,
            description="OpenHands V1 event store directory (event_service/events/event-*.json)",
        )
    ]
