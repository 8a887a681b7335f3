"""A canonical transcript whose older messages are decoded when first read.

Reopening a long session should not decode the messages its checkpoint already covers: the
view needs only the head, the projection body (kept in the sidecar) and the uncovered tail.
A store that can vouch for a prefix of the transcript — its bytes are those it held when the
engine last hashed that prefix (:class:`PrefixStore`) — returns a :class:`Transcript` whose
first messages are still stored lines (:class:`LazyLines`), decoded one by one on first
access, with the covered-prefix hash of that prefix (``vouched``) so validating the
checkpoint reads none of them. Everything that walks the whole transcript still works, at
the price of decoding it; the walks on the hot path (roles for turn counts and pins, call ids
for pairing) read roles from the lines without decoding them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import suppress
from typing import overload

from ctxfold.kernel.contracts import LazyLines, PrefixStore, Store
from ctxfold.kernel.errors import CtxfoldError
from ctxfold.kernel.state import Projection
from ctxfold.kernel.types import Message


class Transcript(Sequence[Message]):
    """The canonical transcript of an open session: append-only in memory, its first
    ``len(lazy)`` messages decoded on first access. ``vouched`` maps prefix lengths to the
    covered-prefix hashes the store vouched for (``kernel.fingerprint`` extends them)."""

    __slots__ = ("_by_role", "_items", "_lazy", "_undecoded", "vouched")

    def __init__(self, messages: Iterable[Message] = (), *, lazy: LazyLines | None = None,
                 vouched: Mapping[int, str] | None = None) -> None:
        count = len(lazy) if lazy is not None else 0
        self._items: list[Message | None] = [None] * count
        self._items.extend(messages)
        self._lazy = lazy if count else None
        self._undecoded = count
        self._by_role: dict[str, list[int]] | None = None
        self.vouched: dict[int, str] = dict(vouched or {})

    def __len__(self) -> int:
        return len(self._items)

    def _at(self, index: int) -> Message:
        message = self._items[index]
        lazy = self._lazy
        if message is None and lazy is not None:
            message = lazy.decode(index)
            if self._items[index] is None:  # (another thread may have decoded it meanwhile)
                self._items[index] = message
                self._undecoded -= 1
                if not self._undecoded:
                    self._lazy = None  # every line decoded: let the stored bytes go
        return self._items[index]  # type: ignore[return-value]

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            if not self._undecoded:
                return self._items[index]  # type: ignore[return-value]
            return [self._at(i) for i in range(*index.indices(len(self._items)))]
        if index < 0:
            index += len(self._items)
        if not 0 <= index < len(self._items):
            raise IndexError("transcript index out of range")
        return self._at(index)

    def __iter__(self) -> Iterator[Message]:
        if not self._undecoded:
            return iter(self._items)  # type: ignore[arg-type]
        return (self._at(i) for i in range(len(self._items)))

    def extend(self, messages: Iterable[Message]) -> None:
        """Append ``messages`` (the transcript only grows; a rewind makes a new one)."""
        start = len(self._items)
        self._items.extend(messages)
        if self._by_role is not None:
            for i in range(start, len(self._items)):
                self._by_role.setdefault(self._items[i].role, []).append(i)  # type: ignore[union-attr]

    def positions(self, role: str) -> list[int]:
        """The ascending positions of the messages with ``role`` (an index kept up to date by
        :meth:`extend`; built once, decoding only lines that do not show their role)."""
        if self._by_role is None:
            by: dict[str, list[int]] = {}
            lazy = self._lazy.roles() if self._lazy is not None else ()
            for i, message in enumerate(self._items):
                shown = lazy[i] if message is None and i < len(lazy) else ""
                key = shown or self._at(i).role
                by.setdefault(key, []).append(i)
            self._by_role = by
        return self._by_role.get(role, [])

    def decoded(self) -> Iterator[Message]:
        """The messages decoded so far, in order (the stored lines left out)."""
        return (m for m in self._items if m is not None)

    @property
    def undecoded(self) -> int:
        """How many messages are still stored lines."""
        return self._undecoded


def with_role(canonical: Sequence[Message], role: str, stop: int | None = None
              ) -> Iterator[tuple[int, Message]]:
    """``(position, message)`` of every message of ``canonical[:stop]`` with ``role``; on a
    :class:`Transcript` the others are not decoded."""
    end = len(canonical) if stop is None else min(stop, len(canonical))
    if isinstance(canonical, Transcript):
        found = canonical.positions(role)
        for i in found[:bisect_left(found, end)]:
            yield i, canonical[i]
        return
    for i in range(end):
        message = canonical[i]
        if message.role == role:
            yield i, message


class CallIds:
    """The ids of the tool calls a transcript made, for pairing tool results with them:
    read from the decoded messages first, from the whole transcript only when an id is not
    among them (a result answering a call in a long-covered message)."""

    def __init__(self, canonical: Sequence[Message]) -> None:
        self._canonical = canonical
        self._complete = not isinstance(canonical, Transcript) or not canonical.undecoded
        self._ids: set[str] = set()
        decoded = canonical.decoded() if isinstance(canonical, Transcript) else canonical
        for message in decoded:
            self._ids.update(_calls(message))

    def __contains__(self, call_id: object) -> bool:
        if call_id in self._ids:
            return True
        if not self._complete:
            for _i, message in with_role(self._canonical, "assistant"):
                self._ids.update(_calls(message))
            self._complete = True
        return call_id in self._ids

    def add(self, ids: Iterable[str]) -> None:
        """Record the calls of an appended batch."""
        self._ids.update(ids)


def _calls(message: Message) -> Iterator[str]:
    if message.role == "assistant":
        for call in message.tool_calls:
            yield call.id


def count_role(canonical: Sequence[Message], role: str) -> int:
    """How many messages of ``canonical`` have ``role`` (a :class:`Transcript` decodes none
    whose line shows its role)."""
    if isinstance(canonical, Transcript):
        return len(canonical.positions(role))
    return sum(1 for m in canonical if m.role == role)


def load_canonical(store: Store, session_id: str) -> Transcript:
    """The session's transcript from ``store`` — lazily when it is a :class:`PrefixStore`."""
    if isinstance(store, PrefixStore):
        loaded = store.load_transcript(session_id)
    else:
        loaded = store.load(session_id)
    return loaded if isinstance(loaded, Transcript) else Transcript(loaded)


def vouch(store: Store, session_id: str, canonical: Transcript,
          projection: Projection | None, revision: str) -> None:
    """Have ``store`` vouch for the covered prefix of ``projection`` (checked or just
    installed) unless it already does, so the next open decodes none of it; a cache, so a
    failure is ignored."""
    if projection is None or not isinstance(store, PrefixStore):
        return
    count, prefix_hash = projection.covered_count, projection.covered_prefix_hash
    if count <= 0 or not prefix_hash or canonical.vouched.get(count) == prefix_hash:
        return
    with suppress(CtxfoldError, OSError):
        store.vouch_prefix(session_id, count, prefix_hash, revision)
        canonical.vouched[count] = prefix_hash


__all__ = ["CallIds", "LazyLines", "PrefixStore", "Transcript", "count_role", "load_canonical",
           "vouch", "with_role"]
