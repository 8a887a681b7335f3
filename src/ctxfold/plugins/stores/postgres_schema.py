"""The ``postgres`` store's schema, versioned, the migrations that create and upgrade it, and
where its DSN comes from (:func:`dsn_from_env`).

Version 1 (``docs/stores.md`` draws it):

* ``ctxfold_schema(version)`` — one row: the schema version this database holds;
* ``ctxfold_sessions`` — one row per session: its ``incarnation`` (new on every create, so a
  session deleted and created again never repeats a revision), ``revision`` (bumped by
  every append and rewind), ``length``, ``rewinds``, ``batches`` and times. Every mutating
  operation locks this row (``SELECT … FOR UPDATE``): the session lock;
* ``ctxfold_messages(session_id, position)`` — the canonical messages, one row each, as the
  ``fs`` store's line text (compact JSON), with the number of the append that wrote them;
* ``ctxfold_sidecars`` — the sidecar bytes with a ``version`` bumped by every write (a
  compare-and-swap compares the bytes under the session lock);
* ``ctxfold_discarded_sidecars`` — invalid sidecars set aside, with the reason.

Version 2 adds ``ctxfold_token_counts(session_id, key)``: the token-count cache of a session
per estimator key (bytes appended to; ``ctxfold.engine.counts``).

Version 3 adds the fork record to ``ctxfold_sessions``: ``parent_id``, ``fork_at``,
``fork_reason`` (``fork`` or ``rewind``) and ``forked_at`` — where a forked session came
from (:class:`~ctxfold.ForkPoint`); null for a session that was created.

Version 4 adds ``ctxfold_appends(session_id, batch_id)``: the id of every append, its first
position and the revisions before and after it, written in the append's own transaction. An
append retried after its commit's outcome was lost checks its id first, so it lands once
(``docs/stores.md``, "An append lands once"). Appends made before version 4 have no row.

Migrations run under a transaction-scoped advisory lock, so two processes starting at once
never both create the tables; a database whose schema is newer than this ctxfold is refused.
"""

from __future__ import annotations

import os
from typing import Any

from ctxfold.kernel.errors import ConfigError, StoreError

#: The schema version this ctxfold writes.
SCHEMA_VERSION = 4
#: ``pg_advisory_xact_lock`` key of schema migrations (an arbitrary, fixed 64-bit number).
MIGRATION_LOCK = 0x637478666F6C64  # "ctxfold"

_V1 = """
CREATE TABLE ctxfold_sessions (
    id text PRIMARY KEY,
    incarnation uuid NOT NULL DEFAULT gen_random_uuid(),
    revision bigint NOT NULL DEFAULT 0,
    length integer NOT NULL DEFAULT 0,
    rewinds integer NOT NULL DEFAULT 0,
    batches integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE ctxfold_messages (
    session_id text NOT NULL REFERENCES ctxfold_sessions (id) ON DELETE CASCADE,
    position integer NOT NULL,
    batch integer NOT NULL,
    message text NOT NULL,
    PRIMARY KEY (session_id, position)
);
CREATE TABLE ctxfold_sidecars (
    session_id text PRIMARY KEY REFERENCES ctxfold_sessions (id) ON DELETE CASCADE,
    version bigint NOT NULL,
    data bytea NOT NULL
);
CREATE TABLE ctxfold_discarded_sidecars (
    session_id text NOT NULL REFERENCES ctxfold_sessions (id) ON DELETE CASCADE,
    discarded_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    reason text NOT NULL,
    data bytea NOT NULL
);
CREATE INDEX ctxfold_discarded_sidecars_session ON ctxfold_discarded_sidecars (session_id);
"""

# Version 2: the token-count cache of each session and estimator (ctxfold.engine.counts).
_V2 = """
CREATE TABLE ctxfold_token_counts (
    session_id text NOT NULL REFERENCES ctxfold_sessions (id) ON DELETE CASCADE,
    key text NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (session_id, key)
);
"""

# Version 3: where a forked session came from (no foreign key: a parent may be deleted).
_V3 = """
ALTER TABLE ctxfold_sessions
    ADD COLUMN parent_id text,
    ADD COLUMN fork_at integer,
    ADD COLUMN fork_reason text,
    ADD COLUMN forked_at timestamptz;
"""

# Version 4: the id of every append, so a retried append lands once (postgres.py).
_V4 = """
CREATE TABLE ctxfold_appends (
    session_id text NOT NULL REFERENCES ctxfold_sessions (id) ON DELETE CASCADE,
    batch_id text NOT NULL,
    position integer NOT NULL,
    revision_before bigint NOT NULL,
    revision_after bigint NOT NULL,
    PRIMARY KEY (session_id, batch_id)
);
"""

#: ``MIGRATIONS[n]`` takes a database from version ``n`` to ``n + 1``.
MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4)


def schema_version(cur: Any) -> int:
    """The version the connected database holds (0: no ctxfold tables)."""
    cur.execute("SELECT to_regclass('ctxfold_schema') IS NOT NULL")
    if not cur.fetchone()[0]:
        return 0
    cur.execute("SELECT max(version) FROM ctxfold_schema")
    row = cur.fetchone()
    return int(row[0] or 0)


def migrate(conn: Any) -> tuple[int, int]:
    """Bring the schema to :data:`SCHEMA_VERSION`; ``(before, after)``. A newer schema is a
    :class:`StoreError` (nothing is changed)."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        before = schema_version(cur)
        if before > SCHEMA_VERSION:
            raise StoreError(
                f"the database holds ctxfold store schema {before}, newer than this ctxfold "
                f"understands ({SCHEMA_VERSION}); upgrade ctxfold"
            )
        if before == 0:
            cur.execute("CREATE TABLE ctxfold_schema (version integer NOT NULL)")
        for version in range(before, SCHEMA_VERSION):
            cur.execute(MIGRATIONS[version])
            cur.execute("INSERT INTO ctxfold_schema (version) VALUES (%s)", (version + 1,))
    return before, SCHEMA_VERSION


__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate", "schema_version"]


#: The variable an empty ``[store] dsn_env`` names.
DEFAULT_DSN_ENV = "CTXFOLD_POSTGRES_DSN"


def dsn_from_env(name: str) -> str:
    """The DSN in environment variable ``name`` (empty: ``CTXFOLD_POSTGRES_DSN``);
    :class:`ConfigError` when it is unset."""
    name = name or DEFAULT_DSN_ENV
    dsn = os.environ.get(name, "")
    if not dsn:
        raise ConfigError(f"the postgres store reads its DSN from the environment variable "
                          f"{name} ([store] dsn_env), which is not set; e.g. export "
                          f"{name}=postgresql://user@host/db")
    return dsn
