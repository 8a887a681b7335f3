"""The store contract (``ctxfold.Store``, ``docs/stores.md``), run on ``fs`` and ``postgres``.

Anything a store must guarantee for ctxfold to keep "nothing is ever lost" is here; what
only one store has (the fs store's torn lines and file modes) is in its own test module.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from tests.postgres import StoreSpec

from ctxfold.kernel.errors import SessionError, StoreError
from ctxfold.kernel.types import Message, ToolCall


def msgs(n: int, tag: str = "m") -> list[Message]:
    return [Message(role="user", content=f"{tag}{i}") for i in range(n)]


def contents(messages) -> list[str]:
    return [m.content for m in messages]


def sidecar(covered: int | None) -> bytes:
    projection = None if covered is None else {"covered_count": covered}
    return json.dumps({"schema_version": 3, "projection": projection}).encode()


HOSTILE = ["../x", "/etc/passwd", "", "a/b", ".hidden", "a\x00b", "x" * 129, "a;drop table x"]


@pytest.mark.parametrize("bad", HOSTILE)
def test_hostile_ids_are_rejected_by_every_entry_point(stores, bad: str) -> None:
    store = stores()
    store.create("ok")
    calls = [
        lambda: store.exists(bad), lambda: store.create(bad), lambda: store.load(bad),
        lambda: store.append(bad, msgs(1)), lambda: store.revision(bad),
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


def test_create_exists_list_and_unknown_sessions(stores) -> None:
    store = stores()
    assert store.list_sessions() == [] and not store.exists("a")
    store.create("b")
    store.create("a")
    assert store.list_sessions() == ["a", "b"] and store.exists("a")
    with pytest.raises(SessionError, match="already exists"):
        store.create("a")
    for call in (lambda: store.load("zz"), lambda: store.append("zz", msgs(1)),
                 lambda: store.revision("zz"), lambda: store.read_sidecar("zz"),
                 lambda: store.rewind("zz", 0), lambda: store.delete("zz")):
        with pytest.raises(SessionError, match="does not exist"):
            call()


def test_messages_round_trip_exactly(stores) -> None:
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


def test_revision_moves_on_append_and_rewind_only(stores) -> None:
    store = stores()
    store.create("s")
    first = store.revision("s")
    appended = store.append("s", msgs(2))
    assert appended.before == first and appended.after == store.revision("s") != first
    store.load("s")
    store.read_sidecar("s")
    assert store.revision("s") == appended.after  # reads never move it
    other = stores().append("s", msgs(1, "o"))
    mine = store.append("s", msgs(1))
    assert mine.before == other.after != appended.after  # another writer came in between
    store.rewind("s", 1)
    assert store.revision("s") not in (first, appended.after, mine.after)
    assert store.append("s", []).before == store.revision("s")


def test_a_deleted_and_recreated_session_never_repeats_a_revision(stores) -> None:
    store = stores()
    store.create("s")
    store.append("s", msgs(1))
    seen = store.revision("s")
    store.delete("s")
    store.create("s")
    store.append("s", msgs(1))
    assert store.revision("s") != seen


def test_a_batch_is_never_seen_in_part(stores) -> None:
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
        store.append("s", msgs(5, f"b{i}-"))
    done.set()
    thread.join(30)
    assert seen and all(n % 5 == 0 for n in seen)
    assert len(store.load("s")) == 300


def test_the_sidecar_is_a_compare_and_swap(stores) -> None:
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


def test_concurrent_swaps_from_one_state_have_exactly_one_winner(stores) -> None:
    store = stores()
    store.create("s")
    store.write_sidecar("s", b"base")
    workers = [stores() for _ in range(6)]
    start = threading.Barrier(len(workers))
    won: list[bool] = []

    def swap(worker, i: int) -> None:
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
        stores, covered: int | None, kept: bool) -> None:
    store = stores()
    store.create("s")
    store.append("s", msgs(4))
    store.write_sidecar("s", sidecar(covered))
    store.rewind("s", 2)
    assert contents(store.load("s")) == ["m0", "m1"]
    assert (store.read_sidecar("s") is not None) is kept
    store.append("s", msgs(1, "n"))
    assert contents(stores().load("s")) == ["m0", "m1", "n0"]
    for bad in (-1, 4, True, "1"):
        with pytest.raises(SessionError, match="upto"):
            store.rewind("s", bad)


def test_fork_copies_a_prefix_and_records_where_it_came_from(stores) -> None:
    store = stores()
    store.create("s")
    store.append("s", msgs(3))
    store.fork("s", "f", 2)
    store.fork("s", "all")
    assert contents(store.load("f")) == ["m0", "m1"]
    assert contents(store.load("all")) == ["m0", "m1", "m2"]
    store.append("f", msgs(1, "f"))
    assert contents(store.load("s")) == ["m0", "m1", "m2"]  # the source is untouched
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
        stores, covered: int | None, upto: int, copied: bool) -> None:
    store = stores()
    store.create("s")
    store.append("s", msgs(4))
    store.write_sidecar("s", sidecar(covered))
    store.fork("s", "f", upto)
    assert store.read_sidecar("f") == (sidecar(covered) if copied else None)
    assert store.read_sidecar("s") == sidecar(covered)


def test_rewind_keeping_the_history_deletes_nothing(stores) -> None:
    store = stores()
    store.create("s")
    store.append("s", msgs(2))
    store.append("s", msgs(3, "n"))
    store.write_sidecar("s", sidecar(4))
    store.rewind("s", 1, keep_as="s-rewound-1")
    assert contents(store.load("s")) == ["m0"] and store.read_sidecar("s") is None
    assert contents(stores().load("s-rewound-1")) == ["m0", "m1", "n0", "n1", "n2"]
    assert store.read_sidecar("s-rewound-1") == sidecar(4)  # its checkpoint still holds
    point = store.fork_point("s-rewound-1")
    assert (point.parent, point.at, point.reason) == ("s", 1, "rewind")
    with pytest.raises(SessionError, match="already exists"):
        store.rewind("s", 0, keep_as="s-rewound-1")
    assert contents(store.load("s")) == ["m0"]  # refused whole: nothing was cut
    store.rewind("s", 1, keep_as="unused")  # nothing to drop: nothing is written
    assert not store.exists("unused")
    with pytest.raises(SessionError, match="upto"):
        store.rewind("s", 5, keep_as="bad")
    assert not store.exists("bad")


def test_delete_removes_transcript_and_sidecars_of_that_session_only(stores) -> None:
    store = stores()
    for sid in ("a", "ab"):
        store.create(sid)
        store.append(sid, msgs(2))
        store.write_sidecar(sid, b"x")
    store.discard_sidecar("a", "test")
    store.delete("a")
    assert not store.exists("a") and store.list_sessions() == ["ab"]
    assert store.read_sidecar("ab") == b"x" and len(store.load("ab")) == 2
    store.create("a")
    assert store.load("a") == [] and store.read_sidecar("a") is None


def test_the_token_count_cache_appends_per_key_and_goes_with_the_session(stores) -> None:
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
    for bad in HOSTILE:
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


def test_last_activity_follows_appends(stores) -> None:
    store = stores()
    store.create("s")
    store.append("s", msgs(1))
    first = store.last_activity("s")
    assert first is not None and abs(first - time.time()) < 120
    time.sleep(0.05)
    store.append("s", msgs(1))
    later = store.last_activity("s")
    assert later is not None and later >= first


def _writer(spec: StoreSpec, tag: str, count: int) -> None:
    store = spec.open()
    for i in range(count):
        store.append("shared", [Message(role="user", content=f"{tag}-{i}:" + "x" * 2000),
                                Message(role="assistant", content=f"{tag}-{i}:ack")])


def test_concurrent_writer_processes_lose_duplicate_and_reorder_nothing(
        store_spec: StoreSpec) -> None:
    store = store_spec.open()
    store.create("shared")
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_writer, args=(store_spec, tag, 40)) for tag in "ABCD"]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    messages = store_spec.open().load("shared")
    assert len(messages) == 4 * 40 * 2
    assert len(set(contents(messages))) == len(messages)  # nothing duplicated
    for i in range(0, len(messages), 2):  # each batch stays together
        assert messages[i + 1].content == messages[i].content.split(":")[0] + ":ack"
    for tag in "ABCD":
        mine = [m.content.split(":")[0] for m in messages[::2] if m.content.startswith(tag)]
        assert mine == [f"{tag}-{i}" for i in range(40)]


def _looping_writer(spec: StoreSpec) -> None:
    store = spec.open()
    i = 0
    while True:
        store.append("s", msgs(4, f"k{i}-"))
        i += 1


def test_a_writer_killed_mid_append_leaves_only_whole_batches(store_spec: StoreSpec) -> None:
    store = store_spec.open()
    store.create("s")
    context = multiprocessing.get_context("spawn")
    for _round in range(3):
        proc = context.Process(target=_looping_writer, args=(store_spec,))
        proc.start()
        deadline = time.time() + 60
        before = len(store.load("s"))
        while len(store.load("s")) < before + 40 and time.time() < deadline:
            time.sleep(0.02)
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        loaded = store_spec.open().load("s")
        assert len(loaded) % 4 == 0 and len(loaded) >= before + 40
    store.append("s", msgs(1, "after"))  # and the session takes appends again
    assert store_spec.open().load("s")[-1].content == "after0"


def _agent(spec: StoreSpec, root: str, name: str, turns: int, queue) -> None:
    from tests.conftest import RecordingSummarizer, make_config

    import ctxfold

    store = spec.open()
    cm = ctxfold.open_session("agents", config=make_config(Path(root), window=12_000,
                                                           ratio=0.5),
                              store=store, summarizer=RecordingSummarizer())
    missing = 0
    for turn in range(turns):
        cm.append(Message(role="user", content=f"{name}-{turn} " + "y" * 400))
        committed = {m.content for m in store.load("agents")}
        view = {m.content for m in cm.prepare().messages}
        projection = cm.state.projection
        covered = projection.covered_count if projection else 0
        tail = {m.content for m in store.load("agents")[covered:]} & committed
        missing += len(tail - view)
    queue.put(missing)


def test_workers_on_one_session_never_prepare_a_view_missing_a_committed_message(
        store_spec: StoreSpec, tmp_path: Path) -> None:
    store = store_spec.open()
    store.create("agents")
    store.append("agents", [Message(role="system", content="sys"),
                            Message(role="user", content="task")])
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    procs = [context.Process(target=_agent, args=(store_spec, str(tmp_path), f"w{i}", 20,
                                                  queue)) for i in range(3)]
    for proc in procs:
        proc.start()
    missing = [queue.get(timeout=240) for _ in procs]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert missing == [0, 0, 0]
    loaded = store.load("agents")
    assert len(loaded) == 2 + 3 * 20 and len({m.content for m in loaded}) == len(loaded)
    assert json.loads(store.read_sidecar("agents") or b"{}").get("projection") is not None
