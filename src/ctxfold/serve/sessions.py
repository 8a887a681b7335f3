"""Which conversation a request belongs to, and which branch of it the request continues.

**Conversations.** A request names its conversation with ``X-Ctxfold-Session`` (validated
like every session id). Without it, a conversation id the client sends of its own accord
names it (:data:`CONVERSATION_HEADERS`, then :data:`CONVERSATION_FIELDS`): ``serve-`` + 24
hex digits of its SHA-256. Without either, the id is derived from the content: ``serve-`` +
24 hex digits of the SHA-256 of the model, the system prompt (every leading system message,
Responses ``instructions`` included) and the first user message.

**Branches.** A conversation is a family of sessions: the one named by its id and its forks
``<id>-fork-<12 hex>``. The client resends its whole history every turn; the proxy compares
it with each branch's transcript *as the client sees it*, message by message, by the
message's *client key*: role, text (surrounding whitespace ignored), non-text parts,
tool-call ids, names and arguments (parsed and serialized canonically, so ``{"a": 1}`` and
``{"a":1}`` are one call), and a tool result's call id — not reasoning, item ids, names,
Anthropic ``cache_control`` marks (which a client moves between turns), thinking signatures
or other fields a client may drop or reorder. An assistant message that called tools is known
by its calls alone (clients drop or rewrite the text around a call). The proxy's own
``use_capability`` exchanges are invisible to the client, so an assistant *group* — an
assistant message that called only ``use_capability``, its answers, and the assistant
messages that continued it — counts as the one assistant message the client received.

Keys are compared through a hash chain (``chain[i]`` hashes the first ``i + 1`` keys), so a
request's history is matched against any branch in O(log n) once its own chain is built,
and the transcript keeps exactly what the client sent: only the comparison normalizes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ctxfold.capabilities.tool import USE_CAPABILITY_TOOL
from ctxfold.kernel.types import TEXT_PART_TYPES, Message
from ctxfold.session_id import validate_session_id

USE_CAPABILITY = USE_CAPABILITY_TOOL.name
SESSION_HEADER = "x-ctxfold-session"
#: Headers real clients send that name their conversation (Codex CLI: ``session_id`` and
#: ``conversation_id``; others: the generic forms), in the order they are looked for.
CONVERSATION_HEADERS = ("session_id", "session-id", "x-session-id", "conversation_id",
                        "conversation-id", "x-conversation-id", "thread_id", "thread-id",
                        "x-thread-id")
#: Body fields that name a conversation: Responses ``prompt_cache_key`` (Codex sends its
#: conversation id there), then ``metadata`` entries of these names.
CONVERSATION_FIELDS = ("prompt_cache_key",)
CONVERSATION_METADATA = ("session_id", "conversation_id", "thread_id")
Key = tuple[Any, ...]


def _digest(value: Any) -> bytes:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _named(prefix: str, value: Any) -> str:
    return validate_session_id(f"{prefix}{_digest(value).hex()[:24]}")


def conversation_id(headers: Mapping[str, str], fields: Mapping[str, Any]) -> str | None:
    """The conversation id the client sent of its own accord, if any."""
    for name in CONVERSATION_HEADERS:
        value = headers.get(name)
        if value and value.strip():
            return value.strip()
    for name in CONVERSATION_FIELDS:
        value = fields.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    metadata = fields.get("metadata")
    if isinstance(metadata, Mapping):
        for name in CONVERSATION_METADATA:
            value = metadata.get(name)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return None


def conversation_session(conversation: str) -> str:
    """The session id of a client-named conversation."""
    return _named("serve-", ["conversation", conversation])


def derive_session_id(model: str, history: Sequence[Message]) -> str:
    """The session id of a request that names no conversation (see the module doc)."""
    system = []
    for message in history:
        if message.role != "system":
            break
        system.append(client_key(message))
    first_user = next((client_key(m) for m in history if m.role == "user"), None)
    return _named("serve-", [model, system, first_user])


def session_from_header(value: str) -> str:
    """The id named by the header (a hostile id is a :class:`~ctxfold.SessionError`)."""
    return validate_session_id(value)


def normal_arguments(arguments: str) -> str:
    """Tool-call arguments as compared: JSON parsed and written canonically (sorted keys,
    no spaces), anything else with its whitespace runs collapsed."""
    try:
        return json.dumps(json.loads(arguments), ensure_ascii=False, sort_keys=True,
                          separators=(",", ":"))
    except (ValueError, RecursionError):
        return " ".join(arguments.split())


def _content_key(message: Message) -> Key:
    text = message.raw_content if message.raw_content is not None else message.content
    if not message.parts:
        return (text.strip(),)
    texts, others = [], []
    for raw in message.parts:
        try:
            part = json.loads(raw)
        except ValueError:
            others.append(raw)
            continue
        if not isinstance(part, dict):
            others.append(json.dumps(part, sort_keys=True))
        elif part.get("type") in TEXT_PART_TYPES and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            # An Anthropic client moves its cache_control marks from block to block between
            # turns (Claude Code marks the newest messages): a mark is not content.
            others.append(json.dumps({k: v for k, v in part.items() if k != "cache_control"},
                                     sort_keys=True))
    return ("\n".join(texts).strip(), *others)


def _calls(message: Message) -> tuple[tuple[str, str, str], ...]:
    return tuple((c.id, c.name, normal_arguments(c.arguments)) for c in message.tool_calls
                 if c.name != USE_CAPABILITY)


#: Responses item types a message models, and reasoning (clients may drop it): the rest —
#: ``custom_tool_call``, ``web_search_call``, … — are part of what a message is.
_UNKEYED_ITEMS = frozenset({"message", "function_call", "function_call_output", "reasoning"})


def _item_keys(message: Message) -> tuple[str, ...]:
    """The message's Responses items of other types, without their ids and statuses."""
    out = []
    for raw in message.responses_items:
        try:
            item = json.loads(raw)
        except ValueError:
            continue
        if isinstance(item, dict) and item.get("type") not in _UNKEYED_ITEMS:
            out.append(json.dumps({k: v for k, v in item.items() if k not in ("id", "status")},
                                  sort_keys=True, ensure_ascii=False))
    return tuple(out)


def client_key(message: Message) -> Key:
    """What the client can see of one message (see the module docstring): a tool result's
    full text (the transcript keeps it bounded, the client sends it whole), no
    ``use_capability`` calls."""
    calls = _calls(message)
    content = ("",) if message.role == "assistant" and calls else _content_key(message)
    items = _item_keys(message) if message.responses_items else ()
    return (message.role, content, calls, message.tool_call_id or "", *items)


def _hash_key(key: Key) -> bytes:
    """The SHA-256 of a key's strings, each length-prefixed (no JSON encoding on the
    per-request path: a history's texts are hashed as they are)."""
    h = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, str):
            data = value.encode("utf-8", "surrogatepass")
            h.update(b"s%d:" % len(data))
            h.update(data)
        else:
            h.update(b"t%d:" % len(value))
            for item in value:
                feed(item)

    feed(key)
    return h.digest()


def key_digest(message: Message) -> bytes:
    """The digest of :func:`client_key`."""
    return _hash_key(client_key(message))


def link(previous: bytes, digest: bytes) -> bytes:
    """The chain link after ``previous`` for a message of key digest ``digest``."""
    return hashlib.sha256(previous + digest).digest()


def chain_of(digests: Sequence[bytes]) -> list[bytes]:
    """``chain[i]``: the hash of the first ``i + 1`` key digests."""
    chain: list[bytes] = []
    previous = b""
    for digest in digests:
        previous = link(previous, digest)
        chain.append(previous)
    return chain


def common_prefix(a: Sequence[bytes], b: Sequence[bytes], limit: int | None = None) -> int:
    """How many leading keys two chains share (equal chain links mean equal prefixes), at
    most ``limit``."""
    low, high = 0, min(len(a), len(b), len(a) if limit is None else limit)
    while low < high:  # invariant: a[:low] == b[:low]; a[:high + 1] may differ
        mid = (low + high + 1) // 2
        if a[mid - 1] == b[mid - 1]:
            low = mid
        else:
            high = mid - 1
    return low


@attrs.frozen
class Group:
    """One message the client sees (the digest of its key) and the transcript messages it
    stands for (``canonical[start:end]``). Only digests are kept: a conversation's branches
    stay indexed after their transcripts left memory."""

    digest: bytes
    start: int
    end: int


class ClientView:
    """A transcript as the client sees it: its groups and their hash chain, extended as
    messages are appended (see the module docstring)."""

    def __init__(self, canonical: Sequence[Message] = ()) -> None:
        self.groups: list[Group] = []
        self.chain: list[bytes] = []
        self.length = 0  # transcript messages read
        self._hidden: set[str] = set()  # use_capability call ids: their answers are ours
        self._texts: list[str] = []
        self._calls: list[tuple[str, str, str]] = []
        self._open = False  # the last assistant called only use_capability
        self.extend(canonical)

    def extend(self, messages: Sequence[Message]) -> None:
        """Read the next transcript messages."""
        for message in messages:
            self._feed(message)
            self.length += 1

    def _set_last(self, group: Group) -> None:
        self.groups[-1] = group
        self.chain[-1] = link(self.chain[-2] if len(self.chain) > 1 else b"", group.digest)

    def _feed(self, message: Message) -> None:
        i = self.length
        if message.role == "tool" and message.tool_call_id in self._hidden:
            if self.groups:
                self.groups[-1] = attrs.evolve(self.groups[-1], end=i + 1)
            return
        mine = [c for c in message.tool_calls if c.name == USE_CAPABILITY]
        self._hidden.update(c.id for c in mine)
        theirs = _calls(message)
        if message.role == "assistant" and self._open and self.groups:
            self._texts.append(message.content)
            self._calls.extend(theirs)
            calls = tuple(self._calls)
            text = ("",) if calls else ("".join(self._texts).strip(),)
            self._set_last(Group(digest=_hash_key(("assistant", text, calls, "")),
                                 start=self.groups[-1].start, end=i + 1))
        else:
            self._texts, self._calls = [message.content], list(theirs)
            digest = key_digest(message)
            self.groups.append(Group(digest=digest, start=i, end=i + 1))
            self.chain.append(link(self.chain[-1] if self.chain else b"", digest))
        self._open = message.role == "assistant" and bool(mine) and not theirs

    @property
    def visible(self) -> int:
        """How many groups the client has seen: all but a trailing ``use_capability``
        exchange that nothing continued (an answer that failed after it), which a retry of
        the request continues."""
        return len(self.groups) - (1 if self._open and self.groups else 0)

    def covered(self, groups: int) -> int:
        """How many transcript messages the first ``groups`` groups stand for."""
        return self.groups[groups - 1].end if groups else 0


@attrs.frozen
class Match:
    """How a request's history meets one branch: the first ``matched`` of its messages
    are the branch's first ``matched`` groups, which stand for ``canonical[:covered]``;
    ``extends`` when every group the client has seen matched (the rest of the history is
    new and is appended after the whole transcript)."""

    matched: int
    covered: int
    extends: bool


def match(view: ClientView, history_chain: Sequence[bytes]) -> Match:
    """Compare a history (its key chain) with a branch (its client view)."""
    visible = view.visible
    matched = common_prefix(view.chain, history_chain, visible)
    return Match(matched=matched, covered=view.covered(matched), extends=matched == visible)


def reconcile(canonical: Sequence[Message], history: Sequence[Message]) -> Match:
    """:func:`match` from messages (for tests and tools)."""
    return match(ClientView(canonical), chain_of([key_digest(m) for m in history]))


def fork_id(family: str, prefix: bytes, differing: bytes | None, attempt: int = 0) -> str:
    """``<family>-fork-<12 hex>``, named from the shared prefix (its chain link), the first
    differing message (its key digest) and, when that name is taken by another branch, an
    attempt number."""
    digest = _digest([prefix.hex(), differing.hex() if differing else None, attempt]).hex()[:12]
    return validate_session_id(f"{family[:100]}-fork-{digest}")


def is_fork_of(family: str, session_id: str) -> bool:
    """Whether ``session_id`` is a fork of the conversation ``family``."""
    return session_id.startswith(f"{family[:100]}-fork-")
