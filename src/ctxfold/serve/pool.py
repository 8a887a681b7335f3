"""The proxy's open sessions and their locks.

Requests of different sessions run concurrently; requests of one session are serialized:
each holds the session's lock from reconciling its history until its answer is in the
transcript. A request that cannot get the lock within the bounded wait is refused with a
:class:`~ctxfold.serve.errors.SessionBusyError` (HTTP 409). Opened sessions are kept (least
recently used first out) so a turn costs O(new messages), not a reload of the transcript.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from ctxfold.engine.manager import ContextManager
from ctxfold.kernel.types import ToolSchema
from ctxfold.serve.errors import SessionBusyError

#: ``open(session_id, tools, create)`` -> a ContextManager for that session.
Opener = Callable[[str, Sequence[ToolSchema], bool], ContextManager]


class SessionPool:
    """Open sessions (at most ``capacity``) and one lock per session in use."""

    def __init__(self, opener: Opener, *, lock_wait: float, capacity: int = 256) -> None:
        self._open = opener
        self.lock_wait = lock_wait
        self.capacity = capacity
        self._sessions: OrderedDict[str, ContextManager] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}
        self._guard = threading.Lock()  # get() runs in worker threads

    def __len__(self) -> int:
        return len(self._sessions)

    @asynccontextmanager
    async def locked(self, session_id: str) -> AsyncIterator[None]:
        """Hold ``session_id``'s lock; wait at most ``lock_wait`` seconds for it."""
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        self._users[session_id] = self._users.get(session_id, 0) + 1
        try:
            try:
                async with asyncio.timeout(self.lock_wait):
                    await lock.acquire()
            except TimeoutError:
                raise SessionBusyError(session_id, self.lock_wait) from None
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
        """The session, opened with ``tools`` (reopened when the client's tools changed).
        Call it with the session's lock held, from a worker thread (it reads files)."""
        with self._guard:
            cm = self._sessions.get(session_id)
        if cm is not None and tuple(cm.tools) != tuple(tools):
            cm = None
        if cm is None:  # outside the guard: the session's own lock keeps it single
            cm = self._open(session_id, tools, create)
        with self._guard:
            self._sessions[session_id] = cm
            self._sessions.move_to_end(session_id)
            for oldest in list(self._sessions)[: max(0, len(self._sessions) - self.capacity)]:
                if oldest not in self._locks:  # a session in use stays
                    del self._sessions[oldest]
        return cm

    def exists(self, cm: ContextManager, session_id: str) -> bool:
        """Whether ``session_id`` exists in ``cm``'s store."""
        return session_id in self._sessions or cm.store.exists(session_id)
