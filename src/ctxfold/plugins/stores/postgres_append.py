"""The ``postgres`` store's append: a batch lands whole, and once.

Every append writes a random batch id in the transaction of its messages
(``ctxfold_appends``, schema version 3) and checks for that id first, under the session's
row lock — which waits until a transaction that lost its connection has finished on the
server. So the one moment a client cannot know the outcome of, a connection lost after
``COMMIT`` was sent, is settled by appending the same id again: a no-op when the first
commit went through, the append itself when it did not (``docs/stores.md``, "An append lands
once"). When the server cannot be reached to settle it, :class:`AppendError` says the batch
may have landed (``landed=None``), and appending the same messages again reuses the id.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

import attrs

from ctxfold.kernel.errors import AppendError, SessionError, StoreError
from ctxfold.kernel.types import Appended, Message
from ctxfold.plugins.stores.fs_lines import encode_message
from ctxfold.plugins.stores.postgres_conn import Connection, ConnectionLost
from ctxfold.session_id import validate_session_id

NOT_STORED = "nothing of the batch was stored: appending it again is safe"
#: Seconds between attempts to reach the server again after a commit's answer was lost.
SETTLE_PAUSE = 0.2


class Appends(Connection):
    """``append`` of :class:`~ctxfold.plugins.stores.postgres.PostgresStore`."""

    def __init__(self, dsn: str, *, connect: Any = None, connect_timeout: float = 10.0,
                 statement_timeout: float = 60.0) -> None:
        super().__init__(dsn, connect=connect, connect_timeout=connect_timeout,
                         statement_timeout=statement_timeout)
        #: session → (batch id, :func:`sameness`) of an append whose commit's outcome is
        #: unknown: the same batch appended again reuses the id, so it lands once.
        self._uncertain: dict[str, tuple[str, list[str]]] = {}

    def append(self, session_id: str, messages: Sequence[Message]) -> Appended:
        """One transaction per batch: the rows, the batch's id and the session's new revision
        together. Its id is checked first, inside the transaction, so an append retried after
        its commit's answer was lost lands once: the store retries by itself until the
        server answers again (within the timeouts), and a caller that retries the very batch
        an :class:`AppendError` with ``landed=None`` named gets that landing back, marked
        ``replayed``."""
        session_id = validate_session_id(session_id)
        lines = [encode_message(m) for m in messages]
        pending = self._uncertain.pop(session_id, None)
        retry = pending is not None and pending[1] == sameness(messages)
        batch_id = pending[0] if pending is not None and retry else uuid.uuid4().hex
        what = f"append to session {session_id!r}"
        try:
            appended = self._append_once(session_id, lines, batch_id, what)
        except ConnectionLost as lost:
            if not lost.committing:
                raise AppendError(f"{lost}; {NOT_STORED}", landed=False) from None
            return self._settle(session_id, messages, lines, batch_id, what, lost)
        except SessionError:
            raise
        except StoreError as exc:
            raise AppendError(f"{exc}; {NOT_STORED}", landed=False) from None
        return appended if retry else attrs.evolve(appended, replayed=False)

    def _append_once(self, session_id: str, lines: list[str], batch_id: str,
                     what: str) -> Appended:
        with self._tx(what) as cur:
            incarnation, revision, length, _, batches = self._session(cur, session_id)
            before = f"{incarnation}:{revision}"
            if not lines:
                return Appended(before, before)
            cur.execute("INSERT INTO ctxfold_appends (session_id, batch_id, position, "
                        "revision_before, revision_after) VALUES (%s, %s, %s, %s, %s) "
                        "ON CONFLICT DO NOTHING",
                        (session_id, batch_id, length, revision, revision + 1))
            if cur.rowcount == 0:  # an earlier attempt of this very append committed
                cur.execute("SELECT revision_before, revision_after FROM ctxfold_appends "
                            "WHERE session_id = %s AND batch_id = %s", (session_id, batch_id))
                first, then = cur.fetchone()
                return Appended(f"{incarnation}:{first}", f"{incarnation}:{then}",
                                replayed=True)
            cur.executemany(
                "INSERT INTO ctxfold_messages (session_id, position, batch, message) "
                "VALUES (%s, %s, %s, %s)",
                [(session_id, length + i, batches + 1, line) for i, line in enumerate(lines)])
            cur.execute("UPDATE ctxfold_sessions SET revision = revision + 1, length = %s, "
                        "batches = batches + 1, updated_at = clock_timestamp() WHERE id = %s",
                        (length + len(lines), session_id))
            self._committing = True  # from here on a failure is the COMMIT's: outcome unknown
        return Appended(before, f"{incarnation}:{revision + 1}")

    def _settle(self, session_id: str, messages: Sequence[Message], lines: list[str],
                batch_id: str, what: str, lost: ConnectionLost) -> Appended:
        """The commit of ``batch_id`` may have gone through: reconnect and append it again
        (a no-op when it had landed), until the server answers or the timeouts run out."""
        deadline = time.monotonic() + self.connect_timeout + self._operation_seconds
        while True:
            try:
                appended = self._append_once(session_id, lines, batch_id, what)
            except StoreError:  # ConnectionLost included; a SessionError is not retried
                if time.monotonic() >= deadline:
                    break
                time.sleep(SETTLE_PAUSE)
                continue
            return attrs.evolve(appended, replayed=False)  # this call's own batch, once
        self._uncertain[session_id] = (batch_id, sameness(messages))
        raise AppendError(
            f"{lost}; the server could not be reached again to learn whether the commit went "
            "through, so the batch may have been stored. Appending the same messages again "
            "through this store stores them once", landed=None) from None


def sameness(messages: Sequence[Message]) -> list[str]:
    """What makes two batches the same append: their lines without the time each message
    was stamped with when it was handed over (a retry stamps them again)."""
    return [encode_message(attrs.evolve(m, created_at="")) for m in messages]
