"""Which session a request belongs to, and how its history meets the canonical transcript.

**Naming.** A request names its session with ``X-Ctxfold-Session`` (validated like every
session id). Without it the id is derived: ``serve-`` + the first 24 hex digits of the
SHA-256 of the model, the system prompt (every leading system message, Responses
``instructions`` included) and the first user message, so every turn of one conversation
maps to the same session.

**Reconciling.** The client resends its whole history; the transcript is compared with it
message by message, by what the client can see of each message (its *client key*: role,
text, non-text parts, tool calls, tool-call id). The proxy's own ``use_capability``
exchanges are invisible to the client, so an assistant *group* — an assistant message that
called only ``use_capability``, its answers, and the assistant messages that continued it —
counts as the one assistant message the client received (texts joined, client tool calls
only). Then:

* the history extends the transcript (every group matched): the rest is appended;
* otherwise (the client edited or rewound) the session *forks*: a new session holding the
  matched prefix, ``<id>-fork-<12 hex>``, named from the parent, the prefix length and the
  first differing message, receives the rest. Nothing is overwritten; the same divergence
  always reaches the same fork, which is reconciled in turn.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import attrs

from ctxfold.capabilities.tool import USE_CAPABILITY_TOOL
from ctxfold.kernel.types import TEXT_PART_TYPES, Message
from ctxfold.session_id import validate_session_id

USE_CAPABILITY = USE_CAPABILITY_TOOL.name
SESSION_HEADER = "x-ctxfold-session"
Key = tuple[Any, ...]


def _digest(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def derive_session_id(model: str, history: Sequence[Message]) -> str:
    """The session id of a request without ``X-Ctxfold-Session`` (see the module doc)."""
    system = []
    for message in history:
        if message.role != "system":
            break
        system.append(client_key(message))
    first_user = next((client_key(m) for m in history if m.role == "user"), None)
    return "serve-" + _digest([model, system, first_user])[:24]


def session_from_header(value: str) -> str:
    """The id named by the header (a hostile id is a :class:`~ctxfold.SessionError`)."""
    return validate_session_id(value)


def _content_key(message: Message, *, full: bool) -> Key:
    text = message.raw_content if full and message.raw_content is not None else message.content
    if not message.parts:
        return (text,)
    texts, others = [], []
    for raw in message.parts:
        part = json.loads(raw)
        if part.get("type") in TEXT_PART_TYPES and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            others.append(json.dumps(part, sort_keys=True))
    return ("\n".join(texts), *others)


def client_key(message: Message) -> Key:
    """What the client can see of one message: a tool result's full text (the transcript
    keeps it bounded, the client sends it whole), no ``use_capability`` calls, no ids of
    Responses items and no reasoning (clients may drop either)."""
    calls = tuple((c.id, c.name, c.arguments) for c in message.tool_calls
                  if c.name != USE_CAPABILITY)
    return (message.role, _content_key(message, full=True), calls, message.tool_call_id or "")


@attrs.frozen
class Group:
    """One message the client sees and the transcript messages it stands for
    (``canonical[start:end]``)."""

    key: Key
    start: int
    end: int


def client_groups(canonical: Sequence[Message]) -> list[Group]:
    """The transcript as the client sees it (see the module docstring)."""
    groups: list[Group] = []
    hidden: set[str] = set()  # ids of use_capability calls: their answers are the proxy's
    texts: list[str] = []
    calls: list[tuple[str, str, str]] = []
    open_group = False  # the last assistant called only use_capability: the next continues
    for i, message in enumerate(canonical):
        if message.role == "tool" and message.tool_call_id in hidden:
            if groups:
                groups[-1] = attrs.evolve(groups[-1], end=i + 1)
            continue
        mine = [c for c in message.tool_calls if c.name == USE_CAPABILITY]
        hidden.update(c.id for c in mine)
        theirs = [(c.id, c.name, c.arguments) for c in message.tool_calls
                  if c.name != USE_CAPABILITY]
        if message.role == "assistant" and open_group and groups:
            texts.append(message.content)
            calls.extend(theirs)
            key = ("assistant", ("".join(texts),), tuple(calls), "")
            groups[-1] = Group(key=key, start=groups[-1].start, end=i + 1)
        else:
            texts, calls = [message.content], list(theirs)
            groups.append(Group(key=client_key(message), start=i, end=i + 1))
        open_group = message.role == "assistant" and bool(mine) and not theirs
    return groups


@attrs.frozen
class Plan:
    """What to do with a request's history: append ``new`` to the session, or — when
    ``fork_id`` is set — fork ``canonical[:covered]`` into ``fork_id`` and append ``new``
    there."""

    new: tuple[Message, ...]
    covered: int
    fork_id: str = ""


def reconcile(session_id: str, canonical: Sequence[Message],
              history: Sequence[Message]) -> Plan:
    """Compare the client's ``history`` with the ``canonical`` transcript (module doc)."""
    groups = client_groups(canonical)
    keys = [client_key(m) for m in history]
    matched = 0
    while matched < min(len(groups), len(keys)) and groups[matched].key == keys[matched]:
        matched += 1
    covered = groups[matched - 1].end if matched else 0
    new = tuple(history[matched:])
    if matched == len(groups):
        return Plan(new=new, covered=covered)
    differing = keys[matched] if matched < len(keys) else None
    return Plan(new=new, covered=covered, fork_id=fork_id(session_id, covered, differing))


def fork_id(session_id: str, covered: int, differing: Key | None) -> str:
    """``<parent>-fork-<12 hex>``: the same divergence always names the same fork."""
    digest = _digest([session_id, covered, differing])[:12]
    return validate_session_id(f"{session_id[:100]}-fork-{digest}")
