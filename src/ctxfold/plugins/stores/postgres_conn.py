"""The ``postgres`` store's connection: opened lazily (and the schema migrated then), one
transaction per operation with database errors mapped to :class:`StoreError` (credentials
masked), and the session row lock every mutating operation takes first."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ctxfold.kernel.errors import SessionError, StoreError
from ctxfold.kernel.types import Message
from ctxfold.plugins.stores.postgres_schema import migrate
from ctxfold.secrets import redact_text
from ctxfold.session_id import validate_session_id

#: Seconds to wait for another worker holding a session before giving up (as ``fs``).
LOCK_TIMEOUT = 60


class Connection:
    """The connection of a :class:`~ctxfold.plugins.stores.postgres.PostgresStore`: opened on
    first use (migrating the schema), one transaction per operation, the session row lock."""

    def __init__(self, dsn: str, *, connect: Any = None) -> None:
        self._dsn = dsn
        self._connect = connect
        self._conn: Any = None
        #: The schema versions before and after this store's first connection migrated it.
        self.migrated: tuple[int, int] | None = None
        self._lock = threading.RLock()
        #: session → (incarnation, rewinds, revision, messages): loads fetch only new rows.
        self._cache: dict[str, tuple[str, int, int, tuple[Message, ...]]] = {}

    def __repr__(self) -> str:
        return "PostgresStore(<dsn from the environment>)"

    # -- connection --------------------------------------------------------------------------

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed or self._conn.broken:
            connect = self._connect
            if connect is None:
                import psycopg

                connect = psycopg.connect
            self._conn = connect(self._dsn, connect_timeout=10, autocommit=True)
            self._conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}s'")
            self.migrated = migrate(self._conn)
        return self._conn

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
        become :class:`StoreError` naming ``what``, with credentials masked."""
        import psycopg

        with self._lock:
            try:
                conn = self._connection()
                with conn.transaction(), conn.cursor() as cur:
                    yield cur
            except psycopg.errors.LockNotAvailable:
                raise StoreError(f"postgres store: {what}: another worker held the session "
                                 f"for more than {LOCK_TIMEOUT} s") from None
            except psycopg.Error as exc:
                raise StoreError(f"postgres store: {what} failed: "
                                 f"{redact_text(str(exc).strip(), self._dsn)}") from None

    def close(self) -> None:
        """Close the connection (a later call reconnects)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

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
