"""The PostgreSQL store ``postgres``: many workers, on many machines, on one session.

Selected with ``[store] name = "postgres"``; the DSN is read from the environment variable
named by ``[store] dsn_env`` (default ``CTXFOLD_POSTGRES_DSN``), never from a file. It needs
the ``postgres`` extra (psycopg 3). The schema (:mod:`.postgres_schema`) is created or
upgraded on first use, or explicitly with ``ctxfold store migrate``.

It keeps the ``fs`` store's guarantees (``docs/stores.md``): a batch is one transaction,
so it lands whole or not at all, and lands once (:mod:`.postgres_append`); every mutating
operation first locks the session's row, so operations on one session are serialized across
every connection; ``replace_sidecar`` compares and writes under that lock; ``revision`` is
one indexed read. Messages are stored as the ``fs`` store's line text, so a ``store copy``
between the two is byte-identical.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from ctxfold.kernel.errors import SessionError
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import StoreOptions, StrategyContext, StrategySpec
from ctxfold.kernel.types import ForkPoint, Message
from ctxfold.plugins.stores.fs_files import projection_within
from ctxfold.plugins.stores.fs_lines import decode_message
from ctxfold.plugins.stores.postgres_append import Appends
from ctxfold.plugins.stores.postgres_conn import read
from ctxfold.plugins.stores.postgres_schema import dsn_from_env
from ctxfold.session_id import validate_count_key, validate_session_id


class PostgresStore(Appends):
    """Sessions in a PostgreSQL database (one connection per store, used by one thread at a
    time; open one store per worker process). ``append`` is :class:`.postgres_append.Appends`'s.
    """

    # -- transcripts -------------------------------------------------------------------------

    @read
    def exists(self, session_id: str) -> bool:
        with self._tx("exists") as cur:
            cur.execute("SELECT 1 FROM ctxfold_sessions WHERE id = %s",
                        (validate_session_id(session_id),))
            return cur.fetchone() is not None

    def create(self, session_id: str) -> None:
        session_id = validate_session_id(session_id)
        with self._tx(f"create session {session_id!r}") as cur:
            cur.execute("INSERT INTO ctxfold_sessions (id) VALUES (%s) ON CONFLICT DO NOTHING",
                        (session_id,))
            if cur.rowcount == 0:
                raise SessionError(f"session {session_id!r} already exists in the postgres "
                                   "store")

    @read
    def list_sessions(self) -> list[str]:
        with self._tx("list sessions") as cur:
            cur.execute("SELECT id FROM ctxfold_sessions ORDER BY id")
            return [row[0] for row in cur.fetchall()]

    @read
    def revision(self, session_id: str) -> str:
        with self._tx("revision") as cur:
            incarnation, revision, *_ = self._session(cur, session_id, lock=False)
            return f"{incarnation}:{revision}"

    @read
    def load(self, session_id: str, *, repair: bool = True) -> list[Message]:
        """The canonical transcript (a database has no torn tail: ``repair`` changes
        nothing). Unchanged since the last load: one read; grown: only the new rows."""
        with self._tx(f"load session {session_id!r}") as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            incarnation, revision, length, rewinds, _ = self._session(cur, session_id,
                                                                      lock=False)
            cached = self._cache.get(session_id)
            kept: tuple[Message, ...] = ()
            if cached and cached[:2] == (incarnation, rewinds) and len(cached[3]) <= length:
                kept = cached[3]
            if len(kept) < length:
                kept = kept + self._rows(cur, session_id, len(kept))
            self._cache[session_id] = (incarnation, rewinds, revision, kept)
            return list(kept)

    def _rows(self, cur: Any, session_id: str, start: int) -> tuple[Message, ...]:
        cur.execute("SELECT position, message FROM ctxfold_messages WHERE session_id = %s "
                    "AND position >= %s ORDER BY position", (session_id, start))
        return tuple(decode_message(text, f"postgres store: session {session_id!r} message "
                                          f"{position}") for position, text in cur)

    @read
    def batches(self, session_id: str) -> list[list[Message]]:
        """The transcript as the batches it was appended in (``store copy`` replays them)."""
        with self._tx(f"read session {session_id!r}") as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            self._session(cur, session_id, lock=False)
            cur.execute("SELECT batch, position, message FROM ctxfold_messages WHERE "
                        "session_id = %s ORDER BY position", (session_id,))
            out: list[list[Message]] = []
            last = None
            for batch, position, text in cur:
                if batch != last:
                    out.append([])
                    last = batch
                out[-1].append(decode_message(
                    text, f"postgres store: session {session_id!r} message {position}"))
            return out

    @read
    def last_activity(self, session_id: str) -> float | None:
        with self._tx("last activity") as cur:
            cur.execute("SELECT extract(epoch FROM updated_at) FROM ctxfold_sessions "
                        "WHERE id = %s", (validate_session_id(session_id),))
            row = cur.fetchone()
            return float(row[0]) if row else None

    # -- sidecars ----------------------------------------------------------------------------

    @read
    def read_sidecar(self, session_id: str) -> bytes | None:
        with self._tx(f"read the sidecar of {session_id!r}") as cur:
            self._session(cur, session_id, lock=False)
            cur.execute("SELECT data FROM ctxfold_sidecars WHERE session_id = %s",
                        (session_id,))
            row = cur.fetchone()
            return bytes(row[0]) if row else None

    def write_sidecar(self, session_id: str, data: bytes) -> None:
        with self._tx(f"write the sidecar of {session_id!r}") as cur:
            self._session(cur, session_id)
            self._put_sidecar(cur, session_id, data)

    def replace_sidecar(self, session_id: str, data: bytes, expected: bytes | None) -> bool:
        with self._tx(f"replace the sidecar of {session_id!r}") as cur:
            self._session(cur, session_id)  # the session lock: no writer in between
            cur.execute("SELECT data FROM ctxfold_sidecars WHERE session_id = %s",
                        (session_id,))
            row = cur.fetchone()
            if (bytes(row[0]) if row else None) != expected:
                return False
            self._put_sidecar(cur, session_id, data)
            return True

    @staticmethod
    def _put_sidecar(cur: Any, session_id: str, data: bytes) -> None:
        cur.execute("INSERT INTO ctxfold_sidecars (session_id, version, data) VALUES (%s, 1, "
                    "%s) ON CONFLICT (session_id) DO UPDATE SET data = EXCLUDED.data, "
                    "version = ctxfold_sidecars.version + 1", (session_id, bytes(data)))

    def discard_sidecar(self, session_id: str, reason: str) -> None:
        """Move the sidecar to ``ctxfold_discarded_sidecars`` with ``reason``."""
        with self._tx(f"discard the sidecar of {session_id!r}") as cur:
            self._session(cur, session_id)
            self._discard(cur, session_id, reason)

    @staticmethod
    def _discard(cur: Any, session_id: str, reason: str) -> None:
        cur.execute("WITH gone AS (DELETE FROM ctxfold_sidecars WHERE session_id = %s "
                    "RETURNING data) INSERT INTO ctxfold_discarded_sidecars (session_id, reason, "
                    "data) SELECT %s, %s, data FROM gone", (session_id, session_id, reason))

    # -- explicit operations -----------------------------------------------------------------

    def fork(self, source_id: str, target_id: str, upto: int | None = None) -> None:
        """A new session from the first ``upto`` messages, in one transaction, with the
        source's sidecar when its projection lies within them (as ``fs`` does) and the fork
        record (:meth:`fork_point`)."""
        target_id = validate_session_id(target_id)
        with self._tx(f"fork {source_id!r} to {target_id!r}") as cur:
            _, _, length, _, _ = self._session(cur, source_id)
            count = length if upto is None else self._check_upto(source_id, upto, length)
            self._copy(cur, source_id, target_id, count, ForkPoint(source_id, count, "fork"),
                       sidecar_within=count)

    def _copy(self, cur: Any, source_id: str, target_id: str, count: int, point: ForkPoint, *,
              sidecar_within: int | None) -> None:
        """Create ``target_id`` holding the source's first ``count`` messages and the fork
        record ``point``, with the source's sidecar when its projection lies within
        ``sidecar_within`` messages (``None``: always)."""
        cur.execute("INSERT INTO ctxfold_sessions (id, revision, length, batches, parent_id, "
                    "fork_at, fork_reason, forked_at) SELECT %s, 1, %s, "
                    "coalesce(max(batch), 0), %s, %s, %s, clock_timestamp() FROM "
                    "ctxfold_messages WHERE session_id = %s AND position < %s "
                    "ON CONFLICT DO NOTHING",
                    (target_id, count, point.parent, point.at, point.reason, source_id, count))
        if cur.rowcount == 0:
            raise SessionError(f"cannot fork {source_id!r}: session {target_id!r} already "
                               "exists in the postgres store; choose another id or delete "
                               "it first")
        cur.execute("INSERT INTO ctxfold_messages (session_id, position, batch, message) "
                    "SELECT %s, position, batch, message FROM ctxfold_messages WHERE "
                    "session_id = %s AND position < %s", (target_id, source_id, count))
        cur.execute("SELECT data FROM ctxfold_sidecars WHERE session_id = %s", (source_id,))
        row = cur.fetchone()
        if row is not None and (sidecar_within is None
                                or projection_within(bytes(row[0]), sidecar_within)):
            self._put_sidecar(cur, target_id, bytes(row[0]))

    def fork_point(self, session_id: str) -> ForkPoint | None:
        """Where the session was forked from; ``None`` for a session that was created."""
        with self._tx(f"read the fork record of {session_id!r}") as cur:
            self._session(cur, session_id, lock=False)
            cur.execute("SELECT parent_id, fork_at, fork_reason, forked_at FROM "
                        "ctxfold_sessions WHERE id = %s", (session_id,))
            parent, at, reason, when = cur.fetchone()
        if parent is None:
            return None
        created = when.astimezone(UTC).isoformat().replace("+00:00", "Z") if when else ""
        return ForkPoint(parent=parent, at=int(at or 0), reason=reason or "fork",
                         created_at=created)

    @staticmethod
    def _check_upto(session_id: str, upto: int, length: int) -> int:
        if isinstance(upto, bool) or not isinstance(upto, int) or not 0 <= upto <= length:
            raise SessionError(f"session {session_id!r} has {length} messages; upto={upto!r} "
                               f"must be an integer from 0 to {length}")
        return upto

    def rewind(self, session_id: str, upto: int, *, keep_as: str | None = None) -> None:
        """Keep the first ``upto`` messages; the sidecar is kept if its projection lies
        inside them, else discarded (as ``fs`` does). With ``keep_as`` the whole history
        and its sidecar are first copied to the new session ``keep_as`` (a fork at ``upto``
        with reason ``"rewind"``), in the same transaction: a rewind deletes nothing."""
        if keep_as is not None:
            keep_as = validate_session_id(keep_as)
        with self._tx(f"rewind session {session_id!r}") as cur:
            _, _, length, _, _ = self._session(cur, session_id)
            count = self._check_upto(session_id, upto, length)
            if count == length:
                return
            if keep_as is not None:
                self._copy(cur, session_id, keep_as, length,
                           ForkPoint(session_id, count, "rewind"), sidecar_within=None)
            cur.execute("DELETE FROM ctxfold_messages WHERE session_id = %s AND position >= %s",
                        (session_id, count))
            cur.execute("DELETE FROM ctxfold_appends WHERE session_id = %s AND position >= %s",
                        (session_id, count))
            cur.execute("UPDATE ctxfold_sessions SET revision = revision + 1, length = %s, "
                        "rewinds = rewinds + 1, updated_at = clock_timestamp() WHERE id = %s",
                        (count, session_id))
            cur.execute("SELECT data FROM ctxfold_sidecars WHERE session_id = %s",
                        (session_id,))
            row = cur.fetchone()
            if row is not None and not projection_within(bytes(row[0]), count):
                self._discard(cur, session_id, f"rewind to {count} messages")

    @read
    def read_counts(self, session_id: str, key: str) -> bytes:
        with self._tx(f"read the token counts of {session_id!r}") as cur:
            cur.execute("SELECT data FROM ctxfold_token_counts WHERE session_id = %s AND "
                        "key = %s", (validate_session_id(session_id), validate_count_key(key)))
            row = cur.fetchone()
            return bytes(row[0]) if row else b""

    def append_counts(self, session_id: str, key: str, data: bytes) -> None:
        with self._tx(f"append token counts of {session_id!r}") as cur:
            cur.execute("INSERT INTO ctxfold_token_counts (session_id, key, data) VALUES "
                        "(%s, %s, %s) ON CONFLICT (session_id, key) DO UPDATE SET data = "
                        "ctxfold_token_counts.data || EXCLUDED.data",
                        (validate_session_id(session_id), validate_count_key(key), data))

    def delete(self, session_id: str) -> None:
        """Remove the session: transcript, sidecar and discarded sidecars (one transaction)."""
        with self._tx(f"delete session {session_id!r}") as cur:
            self._session(cur, session_id)
            cur.execute("DELETE FROM ctxfold_sessions WHERE id = %s", (session_id,))
        self._cache.pop(session_id, None)


def _create(context: StrategyContext[StoreOptions]) -> PostgresStore:
    store = context.config.store
    return PostgresStore(dsn_from_env(store.dsn_env),
                         connect_timeout=store.connect_timeout_seconds,
                         statement_timeout=store.statement_timeout_seconds)


@hookimpl
def ctxfold_stores() -> list[StrategySpec]:
    """Register the PostgreSQL store ``postgres`` (the ``postgres`` extra)."""
    return [
        StrategySpec(
            name="postgres",
            factory=_create,
            description="sessions in PostgreSQL, for many workers on one session "
                        "(DSN from [store] dsn_env)",
            requires=("psycopg",),
            install='pip install "ctxfold[postgres]"',
        )
    ]


__all__ = ["PostgresStore", "dsn_from_env"]
