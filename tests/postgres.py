"""A real PostgreSQL for the tests that need one (the ``postgres`` store): ``postgres_spec``.

They need a server: set ``CTXFOLD_TEST_POSTGRES_DSN`` (``.ci/run`` starts a
throwaway one and sets it). Each test gets its own PostgreSQL schema, dropped afterwards.
Without the variable they are skipped, saying so; with ``CTXFOLD_REQUIRE_POSTGRES=1`` (as
in CI) a missing server is a failure instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import attrs
import pytest

from ctxfold import Store
from ctxfold.plugins.stores.fs import FsStore

DSN_ENV = "CTXFOLD_TEST_POSTGRES_DSN"
HOW = (f"set {DSN_ENV}=postgresql://USER@127.0.0.1:PORT/DB to run the postgres store cases "
       "(.ci/run starts a throwaway server and sets it)")


@attrs.frozen
class StoreSpec:
    """How to open the store under test again — in this process or in a child (picklable)."""

    kind: str
    where: str  # the fs root, or the postgres DSN (with this test's schema)

    def open(self) -> Store:
        if self.kind == "fs":
            return FsStore(Path(self.where))
        from ctxfold.plugins.stores.postgres import PostgresStore

        return PostgresStore(self.where)


def postgres_dsn() -> str | None:
    dsn = os.environ.get(DSN_ENV, "")
    if dsn:
        return dsn
    if os.environ.get("CTXFOLD_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"CTXFOLD_REQUIRE_POSTGRES=1 but {DSN_ENV} is not set")
    pytest.skip(f"no PostgreSQL server: {HOW}")


@pytest.fixture
def postgres_spec() -> Iterator[StoreSpec]:
    """A fresh PostgreSQL schema for one test, as a :class:`StoreSpec`."""
    dsn = postgres_dsn()
    assert dsn is not None
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    joiner = "&" if "?" in dsn else "?"
    yield StoreSpec("postgres", f"{dsn}{joiner}options={quote(f'-csearch_path={schema}')}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
