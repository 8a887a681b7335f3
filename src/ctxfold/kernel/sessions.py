"""What crosses the importer and policy contracts: an imported session, and the requests a
replay policy would send (with the summary calls it made)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from ctxfold.kernel.types import Message, SummaryRequest, ToolSchema, Usage


def _usage_aligned(inst: ImportedSession, _attr: attrs.Attribute[Any], value: Any) -> None:
    if len(value) != len(inst.messages):
        raise ValueError(
            f"reported_usage has {len(value)} entries for {len(inst.messages)} messages; "
            "it must be aligned with messages (None where the format has no usage)"
        )


@attrs.frozen
class ImportedSession:
    """One imported transcript.

    ``messages`` are canonical messages with tool calls paired to their results (trailing
    unanswered calls are allowed). ``tools`` are the tool schemas when the format records
    them. ``reported_usage[i]`` is the provider usage recorded on ``messages[i]`` (an
    assistant message) or ``None``. ``format`` is the importer name, ``source`` the path it
    was read from, ``model`` the model name when the format records it.
    """

    name: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...] = ()
    reported_usage: tuple[Usage | None, ...] = attrs.field(default=(), validator=_usage_aligned)
    format: str = ""
    source: Path = attrs.field(factory=Path, converter=Path)
    model: str = ""


@attrs.frozen
class SummaryCall:
    """One summary request a replay policy made and the text it got back (costed as a
    request)."""

    request: SummaryRequest
    text: str


@attrs.frozen
class PolicyRequest:
    """The request a replay policy would send before one recorded assistant message.

    ``installed`` is True when the policy changed its projection for this request (summary,
    prune, truncation, masking moved) — the only places where the byte-prefix of the previous
    request may legitimately break. ``prunes`` counts the non-summary changes made.
    ``tools``: what the request carries when not the session's (ctxfold's ``use_capability``).
    """

    messages: tuple[Message, ...]
    summaries: tuple[SummaryCall, ...] = ()
    installed: bool = False
    prunes: int = 0
    tools: tuple[ToolSchema, ...] | None = None
