"""What only the ``postgres`` store has: a server that stops answering, a connection lost
around a COMMIT, and the schema it upgrades in place (issue 29, item 7).

Each case runs against the real test server through :class:`tests.pg_proxy.PgProxy`, which
freezes (a stopped server, a dead network) or cuts the connection right after the server
committed (the client never learns that it did).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.pg_proxy import PgProxy
from tests.postgres import StoreSpec

import ctxfold
from ctxfold import AppendError, Message, StoreError
from ctxfold.plugins.stores.postgres import PostgresStore
from ctxfold.plugins.stores.postgres_schema import MIGRATIONS, SCHEMA_VERSION

#: Short timeouts, so a stopped server fails a test within seconds.
FAST = {"connect_timeout": 2.0, "statement_timeout": 1.0}
#: The most a call may take against a stopped server with :data:`FAST`: its statement
#: deadline, then one reconnection and one check when the commit's outcome is unknown.
BOUND = 15.0


def msgs(n: int, tag: str = "m") -> list[Message]:
    return [Message(role="user", content=f"{tag}{i}") for i in range(n)]


def contents(messages: Any) -> list[str]:
    return [m.content for m in messages]


@pytest.fixture
def proxy(postgres_spec: StoreSpec) -> Iterator[PgProxy]:
    proxy = PgProxy(postgres_spec.where)
    yield proxy
    proxy.close()


def bounded(call: Callable[[], Any], seconds: float = 60.0) -> tuple[Any, float]:
    """Run ``call`` in a thread: (its result or exception, seconds it took). A call still
    blocked after ``seconds`` fails the test (the thread is left to the proxy's close)."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except Exception as exc:
            out.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s"
    return out[0], time.monotonic() - started


# -- an ambiguous commit -----------------------------------------------------------------


def test_a_commit_whose_answer_is_lost_is_resolved_and_a_retry_stores_the_batch_once(
        postgres_spec: StoreSpec, proxy: PgProxy) -> None:
    """The connection drops right after the server committed. The store finds out (the
    batch's id is in the database) instead of failing; and a caller that retries anyway
    appends nothing twice. Before: a StoreError although the batch was saved, and the
    retry stored it twice (3 of 3 trials)."""
    store = PostgresStore(proxy.dsn, **FAST)
    store.create("s")
    store.append("s", msgs(1, "first"))
    proxy.cut_after_commit()
    batch = msgs(3, "batch")
    try:
        store.append("s", batch)
    except StoreError:
        store.append("s", batch)  # what a careful caller does after an error
    assert proxy.commits_cut == 1
    assert contents(postgres_spec.open().load("s")) == ["first0", "batch0", "batch1", "batch2"]
    store.append("s", msgs(1, "after"))
    assert contents(postgres_spec.open().load("s"))[-1] == "after0"


def test_an_engine_append_whose_commit_answer_is_lost_lands_once(
        postgres_spec: StoreSpec, proxy: PgProxy, tmp_path: Path) -> None:
    from tests.conftest import make_config

    from ctxfold.testing import RecordingSummarizer

    cm = ctxfold.open_session("s", config=make_config(tmp_path),
                              store=PostgresStore(proxy.dsn, **FAST),
                              summarizer=RecordingSummarizer())
    cm.append({"role": "system", "content": "sys"}, {"role": "user", "content": "task"})
    proxy.cut_after_commit()
    cm.append({"role": "user", "content": "once"})
    assert proxy.commits_cut == 1
    assert contents(cm.canonical) == ["sys", "task", "once"]
    assert contents(postgres_spec.open().load("s")) == ["sys", "task", "once"]
    assert cm.prepare().messages[-1].content == "once"


# -- a server that stops answering -------------------------------------------------------


def test_a_stopped_server_fails_an_append_within_the_timeout_and_nothing_lands(
        postgres_spec: StoreSpec, proxy: PgProxy) -> None:
    """Before: ``append()`` blocked for as long as the server was stopped."""
    store = PostgresStore(proxy.dsn, **FAST)
    store.create("s")
    store.append("s", msgs(1, "first"))
    with proxy.frozen():
        error, took = bounded(lambda: store.append("s", msgs(2, "lost")))
    assert isinstance(error, AppendError), error
    assert error.landed is False
    assert took < BOUND
    assert "did not answer within 1 s" in str(error)
    assert "nothing of the batch was stored" in str(error)
    store.append("s", msgs(1, "after"))  # reconnects once the server answers again
    assert contents(postgres_spec.open().load("s")) == ["first0", "after0"]


@pytest.mark.slow
def test_every_operation_on_a_stopped_server_fails_within_the_timeout(
        proxy: PgProxy) -> None:
    store = PostgresStore(proxy.dsn, **FAST)
    store.create("s")
    calls: list[Callable[[], Any]] = [
        lambda: store.revision("s"), lambda: store.load("s"),
        lambda: store.replace_sidecar("s", b"{}", None)]
    with proxy.frozen():
        for call in calls:
            error, took = bounded(call)
            assert isinstance(error, StoreError), error
            assert took < BOUND
            assert "did not answer" in str(error) or "could not connect" in str(error)


def test_a_new_connection_to_a_stopped_server_times_out(postgres_spec: StoreSpec,
                                                         proxy: PgProxy) -> None:
    store = PostgresStore(proxy.dsn, **FAST)
    with proxy.frozen():
        error, took = bounded(lambda: store.exists("s"))
    assert isinstance(error, StoreError) and took < BOUND
    assert "could not connect within 2 s" in str(error)
    assert postgres_spec.where.split("@")[0] not in str(error)  # no DSN in the message


@pytest.mark.slow
def test_a_commit_made_just_before_the_server_stopped_is_uncertain_then_retried_once(
        postgres_spec: StoreSpec, proxy: PgProxy) -> None:
    """The server commits and stops before answering: the store cannot learn the outcome,
    says so, and the retry once the server is back is a no-op."""
    store = PostgresStore(proxy.dsn, **FAST)
    store.create("s")
    batch = msgs(2, "maybe")
    proxy.freeze_after_commit()
    error, took = bounded(lambda: store.append("s", batch))
    proxy.thaw()
    assert isinstance(error, AppendError), error
    assert error.landed is None and took < BOUND
    assert "may have been stored" in str(error)
    assert contents(postgres_spec.open().load("s")) == ["maybe0", "maybe1"]  # it was
    store.append("s", batch)  # the retry the message asks for: a no-op
    assert contents(postgres_spec.open().load("s")) == ["maybe0", "maybe1"]
    store.append("s", batch)  # and, with no failure before it, a real second append
    assert contents(postgres_spec.open().load("s")) == ["maybe0", "maybe1"] * 2


@pytest.mark.slow
def test_an_engine_retry_after_an_uncertain_append_keeps_one_copy(
        postgres_spec: StoreSpec, proxy: PgProxy, tmp_path: Path) -> None:
    from tests.conftest import make_config

    from ctxfold.testing import RecordingSummarizer

    cm = ctxfold.open_session("s", config=make_config(tmp_path),
                              store=PostgresStore(proxy.dsn, **FAST),
                              summarizer=RecordingSummarizer())
    cm.append({"role": "system", "content": "sys"}, {"role": "user", "content": "task"})
    proxy.freeze_after_commit()
    error, _ = bounded(lambda: cm.append({"role": "user", "content": "maybe"}))
    proxy.thaw()
    assert isinstance(error, AppendError) and error.landed is None
    cm.append({"role": "user", "content": "maybe"})
    assert contents(cm.canonical) == ["sys", "task", "maybe"]
    assert contents(postgres_spec.open().load("s")) == ["sys", "task", "maybe"]
    cm.append({"role": "user", "content": "next"})
    assert contents(cm.prepare().messages) == ["sys", "task", "maybe", "next"]


def test_the_timeouts_come_from_the_store_config(postgres_spec: StoreSpec, proxy: PgProxy,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    (tmp_path / "ctxfold.toml").write_text(
        '[store]\nname = "postgres"\ndsn_env = "PG_UNDER_TEST"\n'
        "connect_timeout_seconds = 2\nstatement_timeout_seconds = 1.5\n")
    monkeypatch.setenv("PG_UNDER_TEST", proxy.dsn)
    config = ctxfold.load_config(config_path=tmp_path / "ctxfold.toml", env={},
                                 cwd=tmp_path, user_config_path=tmp_path / "none.toml")
    store = ctxfold.Registry.from_config(config.config).create(
        "store", "postgres", config=config.config)
    store.create("s")
    with proxy.frozen():
        error, took = bounded(lambda: store.append("s", msgs(1)))
    assert isinstance(error, AppendError) and took < BOUND
    assert "did not answer within 1.5 s" in str(error)


def test_a_statement_over_the_timeout_is_cancelled_by_the_server(
        postgres_spec: StoreSpec) -> None:
    """A live server enforces the statement timeout itself (here: waiting for a session
    another connection holds), and the connection stays usable."""
    store = PostgresStore(postgres_spec.where, **FAST)
    store.create("s")
    with psycopg.connect(postgres_spec.where) as holder:
        holder.execute("SELECT 1 FROM ctxfold_sessions WHERE id = 's' FOR UPDATE")
        error, took = bounded(lambda: store.append("s", msgs(1)))
        assert isinstance(error, AppendError) and error.landed is False and took < BOUND
    store.append("s", msgs(1, "after"))
    assert contents(store.load("s")) == ["after0"]


# -- the schema ---------------------------------------------------------------------------


def test_a_version_2_database_migrates_in_place_and_keeps_its_sessions(
        postgres_spec: StoreSpec) -> None:
    with psycopg.connect(postgres_spec.where, autocommit=True) as conn:
        conn.execute("CREATE TABLE ctxfold_schema (version integer NOT NULL)")
        for version in (0, 1):
            conn.execute(MIGRATIONS[version])
            conn.execute("INSERT INTO ctxfold_schema (version) VALUES (%s)", (version + 1,))
        conn.execute("INSERT INTO ctxfold_sessions (id, revision, length, batches) "
                     "VALUES ('old', 1, 1, 1)")
        conn.execute("INSERT INTO ctxfold_messages (session_id, position, batch, message) "
                     """VALUES ('old', 0, 1, '{"role":"user","content":"kept"}')""")
    store = PostgresStore(postgres_spec.where)
    assert contents(store.load("old")) == ["kept"]
    assert store.migrated == (2, SCHEMA_VERSION)
    store.append("old", msgs(1, "new"))
    assert contents(PostgresStore(postgres_spec.where).load("old")) == ["kept", "new0"]
