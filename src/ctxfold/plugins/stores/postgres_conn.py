"""The ``postgres`` store's connection: opened lazily (and the schema migrated then), one
transaction per operation with database errors mapped to :class:`StoreError` (credentials
masked), the session row lock every mutating operation takes first, and the timeouts.

Timeouts (``[store] connect_timeout_seconds`` and ``statement_timeout_seconds``):

* connecting gives up after the connect timeout (libpq's ``connect_timeout``, at least 2 s);
* the server cancels any statement that runs longer than the statement timeout (its
  ``statement_timeout``; waiting for another worker's session lock is bounded the same way);
* a server that does not answer at all — stopped, frozen, or the network gone — cannot
  cancel anything, and libpq would wait for it forever. A :class:`Watchdog` thread closes the
  connection's socket when one operation has waited :data:`GRACE` seconds past the
  statement timeout, and the operation fails with a :class:`ConnectionLost` that says
  whether it happened while committing (then the outcome of the commit is unknown).
"""

from __future__ import annotations

import functools
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, ParamSpec, TypeVar

from ctxfold.kernel.errors import SessionError, StoreError
from ctxfold.kernel.types import Message
from ctxfold.plugins.stores.postgres_schema import migrate
from ctxfold.secrets import redact_text
from ctxfold.session_id import validate_session_id

#: Seconds to wait for another worker holding a session before giving up (as ``fs``); the
#: statement timeout lowers it.
LOCK_TIMEOUT = 60.0
#: Seconds past the statement timeout after which a server that has not answered is given
#: up on (its own statement timeout would have answered by then).
GRACE = 2.0
#: How long the watchdog thread stays alive with nothing to watch.
WATCHDOG_IDLE = 30.0
#: The longest any timeout is taken to be (a day; ``inf`` in a config means this).
LONGEST = 86_400.0


class ConnectionLost(StoreError):
    """The connection broke, or the server did not answer in time (``timed_out``), during one
    operation; ``committing`` when that was its COMMIT (which may then have gone through)."""

    def __init__(self, message: str, *, committing: bool, timed_out: bool = False) -> None:
        super().__init__(message)
        self.committing = committing
        self.timed_out = timed_out


P = ParamSpec("P")
R = TypeVar("R")


def read(method: Callable[P, R]) -> Callable[P, R]:
    """Mark a store method that only reads: when the connection is lost under it (not when
    the server stopped answering), it runs once more on a new connection."""

    @functools.wraps(method)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except ConnectionLost as lost:
            if lost.timed_out:
                raise
            return method(*args, **kwargs)

    return run


class Watchdog:
    """Shuts down a socket when the operation using it outlives its deadline (libpq has no
    client-side timeout once connected). One thread per store, started on demand, gone
    after :data:`WATCHDOG_IDLE` seconds without an operation. Arming costs a lock: the
    thread is woken only when it would otherwise sleep past the new deadline."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._fd = -1
        self._deadline = 0.0
        self._fired = False
        self._used = False  # armed since the thread last went idle
        self._wake_at = 0.0  # when the thread wakes next
        self._thread: threading.Thread | None = None

    def arm(self, fd: int, seconds: float) -> None:
        with self._cond:
            self._fd, self._deadline, self._fired = fd, time.monotonic() + seconds, False
            self._used = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="ctxfold-postgres-watchdog")
                self._thread.start()
            elif self._deadline < self._wake_at:
                self._cond.notify()

    def disarm(self) -> bool:
        """Stop watching; whether the deadline had passed (the socket was shut down)."""
        with self._cond:
            fired, self._fd, self._fired = self._fired, -1, False
            return fired

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                if self._fd >= 0 and not self._fired and now >= self._deadline:
                    self._fired = True
                    _shut_down(self._fd)
                if self._fd >= 0 and not self._fired:
                    self._wake_at = self._deadline
                elif not self._used:  # a whole idle wait without an operation
                    self._thread = None
                    return
                else:
                    self._used = False
                    self._wake_at = now + WATCHDOG_IDLE
                self._cond.wait(max(0.0, self._wake_at - now))


def _shut_down(fd: int) -> None:
    """Shut the socket behind ``fd`` down (both ways), so a read blocked on it returns;
    ``fd`` itself stays open for its owner to close."""
    try:
        copy = os.dup(fd)
    except OSError:
        return
    try:
        sock = socket.socket(fileno=copy)
    except OSError:
        os.close(copy)
        return
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class Connection:
    """The connection of a :class:`~ctxfold.plugins.stores.postgres.PostgresStore`: opened on
    first use (migrating the schema), one transaction per operation, the session row lock,
    every wait bounded (the module's docstring says how)."""

    def __init__(self, dsn: str, *, connect: Any = None, connect_timeout: float = 10.0,
                 statement_timeout: float = 60.0) -> None:
        self._dsn = dsn
        self._connect = connect
        self._conn: Any = None
        self.connect_timeout = min(connect_timeout, LONGEST)
        self.statement_timeout = min(statement_timeout, LONGEST)
        #: The schema versions before and after this store's first connection migrated it.
        self.migrated: tuple[int, int] | None = None
        self._lock = threading.RLock()
        self._watchdog = Watchdog()
        #: Set by an operation once only its COMMIT remains (postgres.PostgresStore.append).
        self._committing = False
        #: session → (incarnation, rewinds, revision, messages): loads fetch only new rows.
        self._cache: dict[str, tuple[str, int, int, tuple[Message, ...]]] = {}

    def __repr__(self) -> str:
        return "PostgresStore(<dsn from the environment>)"

    @property
    def _lock_seconds(self) -> float:
        return min(LOCK_TIMEOUT, self.statement_timeout)

    @property
    def _operation_seconds(self) -> float:
        """How long one operation may wait for the server before it is given up on."""
        return self.statement_timeout + GRACE

    # -- connection --------------------------------------------------------------------------

    def _connection(self, what: str) -> Any:
        if self._conn is not None and not (self._conn.closed or self._conn.broken):
            return self._conn
        import psycopg

        self._close_quietly()
        connect = self._connect or psycopg.connect
        seconds = max(2, math.ceil(self.connect_timeout))  # libpq's minimum is 2
        try:
            conn = connect(self._dsn, connect_timeout=seconds, autocommit=True)
        except psycopg.errors.ConnectionTimeout:
            raise StoreError(f"postgres store: {what}: could not connect within {seconds} s "
                             "(connect_timeout_seconds): is the server running and "
                             "reachable?") from None
        except psycopg.Error as exc:
            raise StoreError(f"postgres store: {what}: could not connect: "
                             f"{self._redact(exc)}") from None
        self._watchdog.arm(conn.fileno(), self._operation_seconds)
        try:
            conn.execute(f"SET statement_timeout = {int(self.statement_timeout * 1000)}")
            conn.execute(f"SET lock_timeout = {int(self._lock_seconds * 1000)}")
            self.migrated = migrate(conn)
        except BaseException as exc:
            fired = self._watchdog.disarm()
            conn.close()
            if isinstance(exc, StoreError):
                raise
            if isinstance(exc, psycopg.Error):
                raise self._error(what, exc, fired, committing=False) from None
            raise
        self._watchdog.disarm()
        self._conn = conn
        return conn

    def migrate(self) -> tuple[int, int]:
        """Create or upgrade the schema now (``ctxfold store migrate``); the versions before
        and after. Any store operation does it on first use too."""
        with self._tx("migrate the schema"):
            pass
        assert self.migrated is not None
        return self.migrated

    @contextmanager
    def _tx(self, what: str) -> Iterator[Any]:
        """A transaction (committed on success, rolled back on any error); database errors
        become :class:`StoreError` naming ``what``, with credentials masked; a lost
        connection or a server that did not answer in time a :class:`ConnectionLost`."""
        import psycopg

        with self._lock:
            self._committing = False
            conn = self._connection(what)
            self._watchdog.arm(conn.fileno(), self._operation_seconds)
            try:
                with conn.transaction(), conn.cursor() as cur:
                    yield cur
            except psycopg.Error as exc:
                fired = self._watchdog.disarm()
                raise self._error(what, exc, fired, committing=self._committing) from None
            finally:
                self._watchdog.disarm()
                self._committing = False

    def _error(self, what: str, exc: Exception, fired: bool, *,
               committing: bool) -> StoreError:
        import psycopg

        if isinstance(exc, psycopg.errors.LockNotAvailable):
            return StoreError(f"postgres store: {what}: another worker held the session for "
                              f"more than {self._lock_seconds:g} s")
        if isinstance(exc, psycopg.errors.QueryCanceled):
            return StoreError(f"postgres store: {what}: a statement ran longer than "
                              f"{self.statement_timeout:g} s (statement_timeout_seconds) and "
                              "the server cancelled it")
        if fired:
            self._close_quietly()
            return ConnectionLost(
                f"postgres store: {what}: the server did not answer within "
                f"{self.statement_timeout:g} s (statement_timeout_seconds; it may be stopped, "
                "overloaded or unreachable)", committing=committing, timed_out=True)
        conn = self._conn
        if isinstance(exc, psycopg.OperationalError) and (conn is None or conn.broken
                                                           or conn.closed):
            self._close_quietly()
            return ConnectionLost(f"postgres store: {what}: the connection to the server was "
                                  f"lost: {self._redact(exc)}", committing=committing)
        return StoreError(f"postgres store: {what} failed: {self._redact(exc)}")

    def _redact(self, exc: Exception) -> str:
        return redact_text(str(exc).strip(), self._dsn)

    def _close_quietly(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(Exception):  # a broken connection may fail to close: it is gone
                conn.close()

    def close(self) -> None:
        """Close the connection (a later call reconnects)."""
        with self._lock:
            self._close_quietly()

    def _session(self, cur: Any, session_id: str, *, lock: bool = True) -> tuple[Any, ...]:
        """The session's row ``(incarnation, revision, length, rewinds, batches)``, locked
        for this transaction; :class:`SessionError` when there is none."""
        cur.execute("SELECT incarnation::text, revision, length, rewinds, batches "
                    "FROM ctxfold_sessions WHERE id = %s" + (" FOR UPDATE" if lock else ""),
                    (validate_session_id(session_id),))
        row = cur.fetchone()
        if row is None:
            raise SessionError(f"session {session_id!r} does not exist in the postgres store; "
                               "check the id, or create the session first")
        return tuple(row)
