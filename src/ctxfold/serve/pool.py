"""The proxy's open sessions and their locks.

Requests of different sessions run concurrently; requests of one session are serialized:
each holds the session's lock from reconciling its history until its answer is in the
transcript. Waiting for a lock is bounded (a :class:`~ctxfold.serve.errors.SessionBusyError`
when it runs out). Opened sessions are kept, least recently used first out, so a turn costs
O(new messages), not a reload of the transcript: at most ``capacity`` of them, holding at
most about ``max_bytes`` of message text among them (a session in use always stays).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from ctxfold.engine.manager import ContextManager
from ctxfold.kernel.types import Message, ToolSchema
from ctxfold.serve.errors import SessionBusyError

#: ``open(session_id, tools, create)`` -> a ContextManager for that session.
Opener = Callable[[str, Sequence[ToolSchema], bool], ContextManager]


class SessionPool:
    """Open sessions and one lock per session in use."""

    def __init__(self, opener: Opener, *, lock_wait: float, capacity: int = 256,
                 max_bytes: int = 512 * 1024 * 1024) -> None:
        self._open = opener
        self.lock_wait = lock_wait
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._sessions: OrderedDict[str, ContextManager] = OrderedDict()
        #: per open session: (messages measured, their approximate size in characters)
        self._sizes: dict[str, tuple[int, int]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}
        self._guard = threading.Lock()  # get() runs in worker threads

    def __len__(self) -> int:
        return len(self._sessions)

    def busy(self, session_id: str) -> bool:
        """Whether a request holds ``session_id`` now."""
        lock = self._locks.get(session_id)
        return lock is not None and lock.locked()

    @asynccontextmanager
    async def locked(self, session_id: str, wait: float | None = None) -> AsyncIterator[None]:
        """Hold ``session_id``'s lock; wait at most ``wait`` (default ``lock_wait``) seconds
        for it, then raise :class:`SessionBusyError`."""
        wait = self.lock_wait if wait is None else wait
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        self._users[session_id] = self._users.get(session_id, 0) + 1
        try:
            try:
                async with asyncio.timeout(wait):
                    await lock.acquire()
            except TimeoutError:
                raise SessionBusyError(session_id, wait) from None
            try:
                yield
            finally:
                lock.release()
        finally:
            self._users[session_id] -= 1
            if not self._users[session_id]:  # nobody holds or waits: forget the lock
                del self._users[session_id]
                del self._locks[session_id]

    def get(self, session_id: str, tools: Sequence[ToolSchema], *,
            create: bool = True) -> ContextManager:
        """The session, its tools set to ``tools`` (they travel with each request). Call it
        from a worker thread (it may read files); only the holder of the session's lock may
        append to what it returns."""
        with self._guard:
            cm = self._sessions.get(session_id)
        if cm is None:
            cm = self._open(session_id, tools, create)
        cm.tools = tuple(tools)  # (a no-op when they did not change)
        with self._guard:
            if self._sessions.get(session_id) is not cm:
                self._sizes.pop(session_id, None)
            self._sessions[session_id] = cm
            self._sessions.move_to_end(session_id)
        self.measure(session_id, cm)
        return cm

    def peek(self, session_id: str) -> ContextManager | None:
        """The session when it is open, else ``None`` (nothing is opened or touched)."""
        with self._guard:
            return self._sessions.get(session_id)

    def measure(self, session_id: str, cm: ContextManager) -> None:
        """Count what ``session_id`` holds now (it grew) and close the least recently used
        sessions over the bounds."""
        with self._guard:
            measured, size = self._sizes.get(session_id, (0, 0))
        if measured > cm.message_count:  # re-read shorter (a rewind elsewhere)
            measured, size = 0, 0
        size += sum(map(_size, cm.messages_from(measured)))
        with self._guard:
            if self._sessions.get(session_id) is cm:
                self._sizes[session_id] = (cm.message_count, size)
            self._evict()

    def _evict(self) -> None:
        held = sum(size for _count, size in self._sizes.values())
        for oldest in list(self._sessions):
            if len(self._sessions) <= self.capacity and held <= self.max_bytes:
                break
            if oldest in self._locks:  # a session in use stays
                continue
            del self._sessions[oldest]
            held -= self._sizes.pop(oldest, (0, 0))[1]

    def size(self) -> int:
        """The approximate size of the open sessions' messages, in characters."""
        with self._guard:
            return sum(size for _count, size in self._sizes.values())

    def exists(self, cm: ContextManager, session_id: str) -> bool:
        """Whether ``session_id`` exists in ``cm``'s store."""
        return session_id in self._sessions or cm.store.exists(session_id)


def _size(message: Message) -> int:
    """A message's text as the pool counts it (characters, not bytes: cheap and close)."""
    return (len(message.content) + len(message.raw_content or "")
            + sum(map(len, message.parts)) + sum(len(c.arguments) for c in message.tool_calls)
            + sum(map(len, message.responses_items)))
