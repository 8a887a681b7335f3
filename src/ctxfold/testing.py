"""pytest fixtures for ctxfold plugin authors (and ctxfold's own tests).

Enable them in a ``conftest.py``::

    pytest_plugins = ["ctxfold.testing"]

Fixtures:

* ``ctxfold_plugin_manager`` — a fresh plugin manager with the built-ins and every installed
  third-party plugin (so your plugin, installed in the test environment, is there).
* ``ctxfold_registry`` — the strategy registry built from it.
* ``ctxfold_config`` — a :class:`~ctxfold.kernel.config.Config` whose store lives in the
  test's ``tmp_path`` (offline: ``extractive`` summarizer, ``heuristic`` estimator).
* ``ctxfold_emulator`` — a factory: ``ctxfold_emulator(profile="deepseek", **kwargs)`` starts a
  loopback :class:`~ctxfold.emulator.Emulator` on 127.0.0.1 and stops it after the test.
* ``ctxfold_provider_config`` — a factory: ``ctxfold_provider_config(emulator, name=None)``
  returns a Config whose ``[provider]`` points a real provider plugin at the emulator.

Shared fakes, so tests of a host or a plugin do not each write their own:

* :class:`RecordingSummarizer` — a summarizer that records each request and answers from a
  script (results, or exceptions to raise) or with a default briefing.
* :class:`CharEstimator` — an estimator that counts one token per character of content, so
  every figure of a test can be worked out by hand.

And :class:`StoreContract`, the store contract suite (``ctxfold.Store``, ``docs/stores.md``)
the built-in ``fs`` and ``postgres`` stores run: subclass it in a test module named
``Test…`` and give it an ``open_store`` fixture.

pytest is an optional dependency of this module only; ``import ctxfold`` never imports it.

Nothing here touches the network beyond 127.0.0.1.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from ctxfold.kernel.config import (
    Config,
    EstimatorConfig,
    ProviderConfig,
    StoreConfig,
    SummarizerConfig,
)
from ctxfold.kernel.errors import SessionError, StoreError
from ctxfold.kernel.plugin_manager import make_plugin_manager
from ctxfold.kernel.registry import Registry
from ctxfold.kernel.types import (
    Message,
    RequestShape,
    SummaryRequest,
    SummaryResult,
    ToolCall,
    Usage,
)

__all__ = [
    "EMULATOR_KEY_ENV", "CharEstimator", "RecordingSummarizer", "StoreContract",
    "ctxfold_config", "ctxfold_emulator", "ctxfold_plugin_manager", "ctxfold_provider_config",
    "ctxfold_registry",
]


class RecordingSummarizer:
    """A summarizer that records each request and answers from ``results`` (a result to
    return, or an exception to raise, in order) or, when they run out, with a default
    briefing naming the request's number. ``before``, when set, sees each request first."""

    def __init__(self, results: Sequence[SummaryResult | Exception] | None = None) -> None:
        self.requests: list[SummaryRequest] = []
        self.results = list(results or [])
        self.before: Callable[[SummaryRequest], None] | None = None

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        if self.before is not None:
            self.before(request)
        if self.results:
            result = self.results.pop(0)
            if isinstance(result, Exception):
                raise result
            return result
        return SummaryResult(text=f"## Goal\n- summary #{len(self.requests)}")


class CharEstimator:
    """An estimator counting one token per character of message content (tools and roles
    count nothing; it never calibrates)."""

    name = "chars"

    def estimate(self, shape: RequestShape) -> int:
        return sum(len(m.content) for m in shape.messages)

    def calibrate(self, shape: RequestShape, usage: Usage) -> bool:
        return False

    def reset_calibration(self) -> None:
        pass


#: The environment variable the emulator-backed provider configs read their key from.
EMULATOR_KEY_ENV = "CTXFOLD_EMULATOR_KEY"


@pytest.fixture
def ctxfold_plugin_manager() -> Any:
    """A fresh plugin manager per test (built-ins + installed third-party plugins)."""
    return make_plugin_manager()


@pytest.fixture
def ctxfold_registry(ctxfold_plugin_manager: Any) -> Registry:
    """The strategy registry of ``ctxfold_plugin_manager``."""
    return Registry(ctxfold_plugin_manager)


@pytest.fixture
def ctxfold_config(tmp_path: Path) -> Config:
    """An offline config with its session store under ``tmp_path``."""
    return Config(
        estimator=EstimatorConfig(name="heuristic"),
        summarizer=SummarizerConfig(name="extractive"),
        store=StoreConfig(path=str(tmp_path / "sessions")),
    )


@pytest.fixture
def ctxfold_emulator() -> Iterator[Callable[..., Any]]:
    """Factory fixture starting loopback emulators; all are stopped after the test."""
    from ctxfold.emulator import Emulator

    started: list[Any] = []

    def start(profile: str = "deepseek", **kwargs: Any) -> Any:
        emulator = Emulator(profile, **kwargs)
        emulator.start()
        started.append(emulator)
        return emulator

    yield start
    for emulator in started:
        emulator.stop()


@pytest.fixture
def ctxfold_provider_config(
    ctxfold_config: Config, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Config]:
    """Factory: a Config whose real provider plugin talks to a running emulator."""

    def make(emulator: Any, name: str | None = None, **provider: Any) -> Config:
        monkeypatch.setenv(EMULATOR_KEY_ENV, "emulator-test-key")
        fields = {
            "name": name or emulator.profile.name,
            "base_url": emulator.base_url,
            "api_key_env": EMULATOR_KEY_ENV,
            "context_window": emulator.profile.window,
            **provider,
        }
        return attrs.evolve(ctxfold_config, provider=ProviderConfig(**fields))

    return make


# -- the store contract ------------------------------------------------------------------------

#: Opens the store under test (``StoreContract.open_store``).
_Opener = Callable[[], Any]


def _msgs(n: int, tag: str = "m") -> list[Message]:
    return [Message(role="user", content=f"{tag}{i}") for i in range(n)]


def _contents(messages: Sequence[Message]) -> list[str]:
    return [m.content for m in messages]


def _sidecar(covered: int | None) -> bytes:
    projection = None if covered is None else {"covered_count": covered}
    return json.dumps({"schema_version": 3, "projection": projection}).encode()


_HOSTILE = ["../x", "/etc/passwd", "", "a/b", ".hidden", "a\x00b", "x" * 129, "a;drop table x"]

def _writer(open_store: _Opener, tag: str, count: int) -> None:
    store = open_store()
    for i in range(count):
        store.append("shared", [Message(role="user", content=f"{tag}-{i}:" + "x" * 2000),
                                Message(role="assistant", content=f"{tag}-{i}:ack")])

def _looping_writer(open_store: _Opener) -> None:
    store = open_store()
    i = 0
    while True:
        store.append("s", _msgs(4, f"k{i}-"))
        i += 1


class StoreContract:
    """The store contract suite: every guarantee ctxfold's "nothing is ever lost" needs of a
    :class:`~ctxfold.kernel.contracts.Store` (``docs/stores.md``), as pytest tests.

    Subclass it in a test module, named ``Test…`` so pytest collects it, and define the
    ``open_store`` fixture: a zero-argument callable that opens the store under test on the
    same data each time it is called (another worker), empty at the start of each test. It
    must be picklable (e.g. ``functools.partial(MyStore, tmp_path)``): some tests call it in
    child processes they kill mid-append::

        class TestMyStore(StoreContract):
            @pytest.fixture
            def open_store(self, tmp_path):
                return functools.partial(MyStore, tmp_path / "sessions")

    Stores with a ``close()`` method are closed after each test.
    """

    @pytest.fixture
    def open_store(self) -> _Opener:
        """Override: a picklable callable opening the store under test (see the class)."""
        raise NotImplementedError("define an open_store fixture in your StoreContract subclass")

    @pytest.fixture
    def stores(self, open_store: _Opener) -> Iterator[_Opener]:
        """``stores()`` opens the store under test again (another worker on the same data)."""
        opened: list[Any] = []

        def open_one() -> Any:
            opened.append(open_store())
            return opened[-1]

        yield open_one
        for store in opened:
            close = getattr(store, "close", None)
            if close is not None:
                close()

    @pytest.mark.parametrize("bad", _HOSTILE)

    def test_hostile_ids_are_rejected_by_every_entry_point(self, stores: _Opener, bad: str) -> None:
        store = stores()
        store.create("ok")
        calls = [
            lambda: store.exists(bad), lambda: store.create(bad), lambda: store.load(bad),
            lambda: store.append(bad, _msgs(1)), lambda: store.revision(bad),
            lambda: store.read_sidecar(bad), lambda: store.write_sidecar(bad, b"{}"),
            lambda: store.replace_sidecar(bad, b"{}", None),
            lambda: store.discard_sidecar(bad, "test"), lambda: store.last_activity(bad),
            lambda: store.fork("ok", bad), lambda: store.fork(bad, "ok2"),
            lambda: store.rewind(bad, 0), lambda: store.delete(bad),
        ]
        for call in calls:
            with pytest.raises(SessionError, match="invalid session id"):
                call()
        assert store.list_sessions() == ["ok"]

    def test_create_exists_list_and_unknown_sessions(self, stores: _Opener) -> None:
        store = stores()
        assert store.list_sessions() == [] and not store.exists("a")
        store.create("b")
        store.create("a")
        assert store.list_sessions() == ["a", "b"] and store.exists("a")
        with pytest.raises(SessionError, match="already exists"):
            store.create("a")
        for call in (lambda: store.load("zz"), lambda: store.append("zz", _msgs(1)),
                     lambda: store.revision("zz"), lambda: store.read_sidecar("zz"),
                     lambda: store.rewind("zz", 0), lambda: store.delete("zz")):
            with pytest.raises(SessionError, match="does not exist"):
                call()

    def test_messages_round_trip_exactly(self, stores: _Opener) -> None:
        store = stores()
        store.create("s")
        sent = [
            Message(role="system", content="sys"),
            Message(role="user", content="ünïcødé 🚀 \x00 nul and \\ backslash", created_at="t"),
            Message(role="assistant", content="", reasoning_content="think",
                    tool_calls=(ToolCall(id="c1", name="bash", arguments='{"cmd": "ls"}'),)),
            Message(role="tool", content="bounded", raw_content="full " * 1000,
                    tool_call_id="c1", name="bash"),
        ]
        store.append("s", sent)
        assert stores().load("s") == sent  # another worker reads the same values
        assert store.load("s", repair=False) == sent

    def test_revision_moves_on_append_and_rewind_only(self, stores: _Opener) -> None:
        store = stores()
        store.create("s")
        first = store.revision("s")
        appended = store.append("s", _msgs(2))
        assert appended.before == first and appended.after == store.revision("s") != first
        store.load("s")
        store.read_sidecar("s")
        assert store.revision("s") == appended.after  # reads never move it
        other = stores().append("s", _msgs(1, "o"))
        mine = store.append("s", _msgs(1))
        assert mine.before == other.after != appended.after  # another writer came in between
        store.rewind("s", 1)
        assert store.revision("s") not in (first, appended.after, mine.after)
        assert store.append("s", []).before == store.revision("s")

    def test_a_deleted_and_recreated_session_never_repeats_a_revision(
            self, stores: _Opener) -> None:
        store = stores()
        store.create("s")
        store.append("s", _msgs(1))
        seen = store.revision("s")
        store.delete("s")
        store.create("s")
        store.append("s", _msgs(1))
        assert store.revision("s") != seen

    def test_a_batch_is_never_seen_in_part(self, stores: _Opener) -> None:
        store = stores()
        store.create("s")
        done = threading.Event()
        seen: list[int] = []

        def read() -> None:
            reader = stores()
            while not done.is_set():
                seen.append(len(reader.load("s")))

        thread = threading.Thread(target=read)
        thread.start()
        for i in range(60):
            store.append("s", _msgs(5, f"b{i}-"))
        done.set()
        thread.join(30)
        assert seen and all(n % 5 == 0 for n in seen)
        assert len(store.load("s")) == 300

    def test_the_sidecar_is_a_compare_and_swap(self, stores: _Opener) -> None:
        store = stores()
        store.create("s")
        assert store.read_sidecar("s") is None
        assert store.replace_sidecar("s", b"one", None)
        assert not store.replace_sidecar("s", b"two", None)  # it is no longer absent
        assert not store.replace_sidecar("s", b"two", b"stale")
        assert store.read_sidecar("s") == b"one"
        assert store.replace_sidecar("s", b"two", b"one") and stores().read_sidecar("s") == b"two"
        store.write_sidecar("s", b"three")
        assert store.read_sidecar("s") == b"three"
        store.discard_sidecar("s", "test")
        assert store.read_sidecar("s") is None
        assert store.replace_sidecar("s", b"four", None)

    def test_concurrent_swaps_from_one_state_have_exactly_one_winner(self, stores: _Opener) -> None:
        store = stores()
        store.create("s")
        store.write_sidecar("s", b"base")
        workers = [stores() for _ in range(6)]
        start = threading.Barrier(len(workers))
        won: list[bool] = []

        def swap(worker: Any, i: int) -> None:
            start.wait()
            won.append(worker.replace_sidecar("s", f"w{i}".encode(), b"base"))

        threads = [threading.Thread(target=swap, args=(w, i)) for i, w in enumerate(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(won) == [False] * 5 + [True]
        assert store.read_sidecar("s") in {f"w{i}".encode() for i in range(6)}

    @pytest.mark.parametrize(("covered", "kept"), [(None, True), (2, True), (3, False)])

    def test_rewind_keeps_the_sidecar_only_if_its_projection_still_fits(
            self, stores: _Opener, covered: int | None, kept: bool) -> None:
        store = stores()
        store.create("s")
        store.append("s", _msgs(4))
        store.write_sidecar("s", _sidecar(covered))
        store.rewind("s", 2)
        assert _contents(store.load("s")) == ["m0", "m1"]
        assert (store.read_sidecar("s") is not None) is kept
        store.append("s", _msgs(1, "n"))
        assert _contents(stores().load("s")) == ["m0", "m1", "n0"]
        for bad in (-1, 4, True, "1"):
            with pytest.raises(SessionError, match="upto"):
                store.rewind("s", bad)

    def test_fork_copies_a_prefix_and_records_where_it_came_from(self, stores: _Opener) -> None:
        store = stores()
        store.create("s")
        store.append("s", _msgs(3))
        store.fork("s", "f", 2)
        store.fork("s", "all")
        assert _contents(store.load("f")) == ["m0", "m1"]
        assert _contents(store.load("all")) == ["m0", "m1", "m2"]
        store.append("f", _msgs(1, "f"))
        assert _contents(store.load("s")) == ["m0", "m1", "m2"]  # the source is untouched
        point = stores().fork_point("f")
        assert (point.parent, point.at, point.reason) == ("s", 2, "fork") and point.created_at
        assert store.fork_point("all").at == 3 and store.fork_point("s") is None
        with pytest.raises(SessionError, match="already exists"):
            store.fork("s", "f")
        with pytest.raises(SessionError, match="upto"):
            store.fork("s", "g", 9)
        assert not store.exists("g")
        store.delete("s")  # a fork outlives its parent, and keeps saying where it came from
        assert store.fork_point("f").parent == "s"

    @pytest.mark.parametrize(("covered", "upto", "copied"), [
        (None, 2, True), (2, 1, False), (2, 2, True), (2, 3, True)])

    def test_fork_carries_the_sidecar_when_its_projection_lies_within_the_fork_point(
            self, stores: _Opener, covered: int | None, upto: int, copied: bool) -> None:
        store = stores()
        store.create("s")
        store.append("s", _msgs(4))
        store.write_sidecar("s", _sidecar(covered))
        store.fork("s", "f", upto)
        assert store.read_sidecar("f") == (_sidecar(covered) if copied else None)
        assert store.read_sidecar("s") == _sidecar(covered)

    def test_rewind_keeping_the_history_deletes_nothing(self, stores: _Opener) -> None:
        store = stores()
        store.create("s")
        store.append("s", _msgs(2))
        store.append("s", _msgs(3, "n"))
        store.write_sidecar("s", _sidecar(4))
        store.rewind("s", 1, keep_as="s-rewound-1")
        assert _contents(store.load("s")) == ["m0"] and store.read_sidecar("s") is None
        assert _contents(stores().load("s-rewound-1")) == ["m0", "m1", "n0", "n1", "n2"]
        assert store.read_sidecar("s-rewound-1") == _sidecar(4)  # its checkpoint still holds
        point = store.fork_point("s-rewound-1")
        assert (point.parent, point.at, point.reason) == ("s", 1, "rewind")
        with pytest.raises(SessionError, match="already exists"):
            store.rewind("s", 0, keep_as="s-rewound-1")
        assert _contents(store.load("s")) == ["m0"]  # refused whole: nothing was cut
        store.rewind("s", 1, keep_as="unused")  # nothing to drop: nothing is written
        assert not store.exists("unused")
        with pytest.raises(SessionError, match="upto"):
            store.rewind("s", 5, keep_as="bad")
        assert not store.exists("bad")

    def test_delete_removes_transcript_and_sidecars_of_that_session_only(
            self, stores: _Opener) -> None:
        store = stores()
        for sid in ("a", "ab"):
            store.create(sid)
            store.append(sid, _msgs(2))
            store.write_sidecar(sid, b"x")
        store.discard_sidecar("a", "test")
        store.delete("a")
        assert not store.exists("a") and store.list_sessions() == ["ab"]
        assert store.read_sidecar("ab") == b"x" and len(store.load("ab")) == 2
        store.create("a")
        assert store.load("a") == [] and store.read_sidecar("a") is None

    def test_the_token_count_cache_appends_per_key_and_goes_with_the_session(
            self, stores: _Opener) -> None:
        store = stores()
        store.create("a")
        store.create("b")
        assert store.read_counts("a", "est-1-abc") == b""
        store.append_counts("a", "est-1-abc", b"one")
        store.append_counts("a", "est-1-abc", b"two")
        store.append_counts("a", "est-2-def", b"other")
        store.append_counts("b", "est-1-abc", b"b's")
        assert store.read_counts("a", "est-1-abc") == b"onetwo"
        assert store.read_counts("a", "est-2-def") == b"other"
        for bad in _HOSTILE:
            with pytest.raises(SessionError, match="invalid session id"):
                store.read_counts(bad, "k")
            with pytest.raises(SessionError, match="invalid session id"):
                store.append_counts(bad, "k", b"x")
        for key in ("../x", "", "a/b", "k" * 101):
            with pytest.raises(StoreError, match="invalid token-count key"):
                store.append_counts("b", key, b"x")
        store.delete("a")
        store.create("a")
        assert store.read_counts("a", "est-1-abc") == b""  # a new session starts without any
        assert store.read_counts("b", "est-1-abc") == b"b's"

    def test_last_activity_follows_appends(self, stores: _Opener) -> None:
        store = stores()
        store.create("s")
        store.append("s", _msgs(1))
        first = store.last_activity("s")
        assert first is not None and abs(first - time.time()) < 120
        time.sleep(0.05)
        store.append("s", _msgs(1))
        later = store.last_activity("s")
        assert later is not None and later >= first

    def test_concurrent_writer_processes_lose_duplicate_and_reorder_nothing(
            self, open_store: _Opener) -> None:
        store = open_store()
        store.create("shared")
        context = multiprocessing.get_context("spawn")
        procs = [context.Process(target=_writer, args=(open_store, tag, 40)) for tag in "ABCD"]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(120)
            assert proc.exitcode == 0
        messages = open_store().load("shared")
        assert len(messages) == 4 * 40 * 2
        assert len(set(_contents(messages))) == len(messages)  # nothing duplicated
        for i in range(0, len(messages), 2):  # each batch stays together
            assert messages[i + 1].content == messages[i].content.split(":")[0] + ":ack"
        for tag in "ABCD":
            mine = [m.content.split(":")[0] for m in messages[::2] if m.content.startswith(tag)]
            assert mine == [f"{tag}-{i}" for i in range(40)]

    def test_a_writer_killed_mid_append_leaves_only_whole_batches(
            self, open_store: _Opener) -> None:
        store = open_store()
        store.create("s")
        context = multiprocessing.get_context("spawn")
        for _round in range(3):
            proc = context.Process(target=_looping_writer, args=(open_store,))
            proc.start()
            deadline = time.time() + 60
            before = len(store.load("s"))
            while len(store.load("s")) < before + 40 and time.time() < deadline:
                time.sleep(0.02)
            assert proc.pid is not None
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(30)
            loaded = open_store().load("s")
            assert len(loaded) % 4 == 0 and len(loaded) >= before + 40
        store.append("s", _msgs(1, "after"))  # and the session takes appends again
        assert open_store().load("s")[-1].content == "after0"
