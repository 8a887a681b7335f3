"""The filesystem store: transcripts, crash recovery, locking, sidecar files (design §1.2, §1.3),
fork, rewind and delete (design §1.1)."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import time
import warnings
from pathlib import Path

import pytest

from ctxfold import (
    Config,
    Message,
    Registry,
    SessionError,
    SidecarError,
    Store,
    StoreError,
    StoreOptions,
    ToolCall,
)
from ctxfold.kernel.config import StoreConfig
from ctxfold.kernel.kinds import STORE
from ctxfold.plugins.stores import fs as fs_module
from ctxfold.plugins.stores.fs import FsStore, StoreWarning


@pytest.fixture
def store(tmp_path: Path) -> FsStore:
    return FsStore(tmp_path / "sessions")


def _msgs(n: int, start: int = 0) -> list[Message]:
    return [Message(role="user", content=f"message {i}") for i in range(start, start + n)]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- ids, lifecycle ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "", "a/b", ".hidden", "a\x00b", "x" * 129])
def test_hostile_ids_are_rejected_everywhere(store: FsStore, tmp_path: Path, bad: str) -> None:
    store.create("ok")
    calls = [
        lambda: store.exists(bad),
        lambda: store.create(bad),
        lambda: store.load(bad),
        lambda: store.append(bad, _msgs(1)),
        lambda: store.read_sidecar(bad),
        lambda: store.write_sidecar(bad, b"{}"),
        lambda: store.discard_sidecar(bad, "test"),
        lambda: store.last_activity(bad),
        lambda: store.fork("ok", bad),
        lambda: store.fork(bad, "ok2"),
        lambda: store.rewind(bad, 0),
        lambda: store.delete(bad),
    ]
    for call in calls:
        with pytest.raises(SessionError, match="invalid session id"):
            call()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["ok.jsonl", "sessions"]


def test_create_exists_list(store: FsStore) -> None:
    assert store.list_sessions() == []  # root does not exist yet
    assert not store.exists("b")
    store.create("b")
    store.create("a")
    assert store.exists("b")
    assert store.list_sessions() == ["a", "b"]
    assert store.load("a") == []
    with pytest.raises(SessionError, match="already exists"):
        store.create("a")


def test_unknown_session_names_id_and_root(store: FsStore) -> None:
    store.create("other")
    for call in (
        lambda: store.load("nope"),
        lambda: store.append("nope", _msgs(1)),
        lambda: store.rewind("nope", 0),
        lambda: store.delete("nope"),
        lambda: store.write_sidecar("nope", b"{}"),
        lambda: store.fork("nope", "copy"),
    ):
        with pytest.raises(SessionError) as info:
            call()
        assert "'nope'" in str(info.value) and str(store.root) in str(info.value)
    assert not (store.root / "nope.lock").exists()
    assert store.last_activity("nope") is None


def test_file_modes(tmp_path: Path) -> None:
    store = FsStore(tmp_path / "root")
    store.create("s")
    store.append("s", _msgs(1))
    store.write_sidecar("s", b"{}\n")
    with (store.root / "s.jsonl").open("ab") as handle:
        handle.write(b'{"role":"us')
    with pytest.warns(StoreWarning):
        store.load("s")
    assert _mode(store.root) == 0o700
    for name in ("s.jsonl", "s.context.json", "s.lock", "s.jsonl.corrupt"):
        assert _mode(store.root / name) == 0o600, name
    store.fork("s", "t")
    assert _mode(store.root / "t.jsonl") == 0o600
    store.rewind("s", 0)
    assert _mode(store.root / "s.jsonl") == 0o600


# -- append / load -----------------------------------------------------------------------------


def test_round_trip_unicode_raw_content_and_tool_calls(store: FsStore) -> None:
    messages = [
        Message(role="system", content="你是助手 🤖"),
        Message(role="user", content="line1\nline2\u2028end \"quoted\" \\ 😀", origin="user"),
        Message(
            role="assistant",
            content="",
            reasoning_content="思考…",
            tool_calls=(ToolCall(id="c1", name="bash", arguments='{"cmd": "ls -la"}'),),
        ),
        Message(role="tool", tool_call_id="c1", name="bash", content="bounded…",
                raw_content="完整输出 " * 1000),
        Message(role="user", content="lone \ud800 surrogate", local_only=True, partial=True,
                created_at="2026-01-01T00:00:00Z", id="m5", origin="host"),
    ]
    store.create("s")
    store.append("s", messages[:2])
    store.append("s", messages[2:])
    assert store.load("s") == messages
    # From disk: the lone surrogate written past check_message (a store-level append) is
    # escaped in the file and read back repaired (U+FFFD), never as a text that cannot be sent.
    reread = FsStore(store.root).load("s")
    assert reread[:4] == messages[:4]
    assert reread[4].content == "lone \ufffd surrogate" and reread[4].id == "m5"
    lines = (store.root / "s.jsonl").read_bytes().split(b"\n")
    assert len(lines) == 6 and lines[-1] == b""
    first = json.loads(lines[0])
    # defaults omitted; a line of a multi-message append starts with its place in the batch
    assert first == {"batch": "1/2", "role": "system", "content": "你是助手 🤖"}
    assert lines[0].startswith(b'{"batch":"1/2",') and lines[4].startswith(b'{"batch":"3/3",')
    assert "你是助手".encode() in lines[0]  # UTF-8, not \u escapes


def test_append_batch_is_one_write_and_one_fsync(
    store: FsStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create("s")
    store.load("s")
    transcript = store.root / "s.jsonl"
    writes: list[int] = []
    syncs: list[int] = []
    real_write, real_fsync = os.write, os.fsync

    def write(fd: int, data: bytes) -> int:
        if os.path.realpath(f"/proc/self/fd/{fd}") == str(transcript):
            writes.append(len(data))
        return real_write(fd, data)

    def fsync(fd: int) -> None:
        if os.path.realpath(f"/proc/self/fd/{fd}") == str(transcript):
            syncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(fs_module.os, "write", write)
    monkeypatch.setattr(fs_module.os, "fsync", fsync)
    store.append("s", _msgs(50))
    assert len(writes) == 1 and len(syncs) == 1
    assert writes[0] == transcript.stat().st_size
    assert len(store.load("s")) == 50


def test_blank_lines_are_skipped(store: FsStore) -> None:
    store.create("s")
    store.append("s", _msgs(2))
    path = store.root / "s.jsonl"
    a, b = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(a + b"\n  \n" + b + b"\n")
    assert store.load("s") == _msgs(2)


# -- crash recovery ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fragment",
    [
        b'{"role":"user","content":"unfinis',
        b'{"role":"user","content":"caf\xc3',  # cut inside a UTF-8 character
        b"\x00\x00\x00\x00",  # zero-filled block after a power loss
        b'{"role":"user","content":"x"}',  # complete JSON but no newline: not committed
        b"garbage\n",  # newline present but the last line is not JSON
    ],
)
def test_torn_last_line_is_moved_to_corrupt(store: FsStore, fragment: bytes) -> None:
    store.create("s")
    store.append("s", _msgs(3))
    path = store.root / "s.jsonl"
    good = path.read_bytes()
    with path.open("ab") as handle:
        handle.write(fragment)
    fresh = FsStore(store.root)
    with pytest.warns(StoreWarning, match=r"s\.jsonl.*moved to .*s\.jsonl\.corrupt"):
        assert fresh.load("s") == _msgs(3)
    assert path.read_bytes() == good
    corrupt = (store.root / "s.jsonl.corrupt").read_bytes()
    assert corrupt == fragment if fragment.endswith(b"\n") else fragment + b"\n"
    # Appending afterwards continues cleanly from the last good line.
    fresh.append("s", _msgs(1, start=3))
    assert FsStore(store.root).load("s") == _msgs(4)


def test_append_after_torn_tail_never_merges(store: FsStore) -> None:
    store.create("s")
    store.append("s", _msgs(2))
    with (store.root / "s.jsonl").open("ab") as handle:
        handle.write(b'{"role":"assistant","content":"cut')
    other = FsStore(store.root)  # no cache: it must look at the file before appending
    with pytest.warns(StoreWarning):
        other.append("s", _msgs(1, start=2))
    assert FsStore(store.root).load("s") == _msgs(3)
    assert b"cut" in (store.root / "s.jsonl.corrupt").read_bytes()


def test_corrupt_file_is_appended_never_overwritten(store: FsStore) -> None:
    store.create("s")
    path = store.root / "s.jsonl"
    for i, fragment in enumerate((b'{"first', b'{"second')):
        store.append("s", _msgs(1, start=i))
        with path.open("ab") as handle:
            handle.write(fragment)
        with pytest.warns(StoreWarning):
            FsStore(store.root).load("s")
    assert (store.root / "s.jsonl.corrupt").read_bytes() == b'{"first\n{"second\n'
    assert FsStore(store.root).load("s") == _msgs(2)


@pytest.mark.parametrize(
    ("bad_line", "why"),
    [
        (b"{not json}", "invalid JSON"),
        (b'{"role":"user","content":"caf\xff"}', "invalid UTF-8"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"role":"wizard","content":"x"}', "not a transcript message"),
        (b'{"content":"no role"}', "not a transcript message"),
    ],
)
def test_middle_corruption_raises_with_file_and_line(
    store: FsStore, bad_line: bytes, why: str
) -> None:
    store.create("s")
    store.append("s", _msgs(4))
    path = store.root / "s.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = bad_line + b"\n"
    path.write_bytes(b"".join(lines))
    before = path.read_bytes()
    with pytest.raises(StoreError) as info:
        FsStore(store.root).load("s")
    message = str(info.value)
    assert str(path) in message and "line 3" in message and why in message
    assert path.read_bytes() == before  # nothing repaired behind the user's back
    assert not (store.root / "s.jsonl.corrupt").exists()


def test_valid_json_non_message_last_line_is_an_error_not_a_tear(store: FsStore) -> None:
    store.create("s")
    store.append("s", _msgs(2))
    with (store.root / "s.jsonl").open("ab") as handle:
        handle.write(b'{"role":"robot"}\n')
    with pytest.raises(StoreError, match="line 3"):
        FsStore(store.root).load("s")


# -- concurrency -------------------------------------------------------------------------------


def _writer(root: str, session_id: str, tag: str, count: int) -> None:
    store = FsStore(Path(root))
    for i in range(count):
        store.append(session_id, [Message(role="user", content=f"{tag}-{i}:" + "x" * 5000)])


def test_two_processes_appending_never_interleave(store: FsStore) -> None:
    store.create("shared")
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_writer, args=(str(store.root), "shared", tag, 200))
        for tag in ("A", "B")
    ]
    for proc in procs:
        proc.start()
    reads = 0
    # Lock-free loads while both write: must never fail or "repair" an append in flight.
    while any(proc.is_alive() for proc in procs):
        FsStore(store.root).load("shared")
        reads += 1
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    messages = FsStore(store.root).load("shared")
    assert len(messages) == 400
    assert len((store.root / "shared.jsonl").read_bytes().splitlines()) == 400
    for tag in ("A", "B"):
        mine = [m.content.split(":")[0] for m in messages if m.content.startswith(tag)]
        assert mine == [f"{tag}-{i}" for i in range(200)]  # each writer's order kept
    assert all(m.content.endswith("x" * 5000) for m in messages)
    assert not (store.root / "shared.jsonl.corrupt").exists()
    assert reads > 0


def test_unfinished_line_of_an_append_in_flight_is_not_repaired(store: FsStore) -> None:
    import threading

    import filelock

    store.create("s")
    store.append("s", _msgs(1))
    path = store.root / "s.jsonl"
    line = (json.dumps({"role": "user", "content": "in flight"}) + "\n").encode()
    holder = filelock.FileLock(store.root / "s.lock")  # another writer, mid-append
    holder.acquire()
    with path.open("ab") as handle:
        handle.write(line[:10])
    result: list[list[Message]] = []
    reader = threading.Thread(target=lambda: result.append(FsStore(store.root).load("s")))
    reader.start()
    reader.join(0.5)
    assert reader.is_alive()  # it saw the unfinished line and waits for the lock
    assert not (store.root / "s.jsonl.corrupt").exists()
    with path.open("ab") as handle:
        handle.write(line[10:])
    holder.release()
    reader.join(10)
    assert result == [[*_msgs(1), Message(role="user", content="in flight")]]
    assert not (store.root / "s.jsonl.corrupt").exists()


# -- cache and speed ---------------------------------------------------------------------------


def test_unchanged_session_is_not_parsed_again(
    store: FsStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create("s")
    store.append("s", _msgs(5))
    store.load("s")
    calls: list[int] = []
    real = fs_module.parse_transcript

    def counting(data: bytes, path: Path) -> fs_module.ParsedTranscript:
        calls.append(1)
        return real(data, path)

    monkeypatch.setattr(fs_module, "parse_transcript", counting)
    first = store.load("s")
    first.append(Message(role="user", content="caller's own list"))
    assert store.load("s") == _msgs(5)  # the cache hands out copies
    store.append("s", _msgs(1, start=5))  # own appends extend the cache
    assert store.load("s") == _msgs(6)
    assert calls == []  # append() after a cached load keeps the cache warm
    FsStore(store.root).append("s", _msgs(1, start=6))  # another writer: it parses once to
    assert store.load("s") == _msgs(7)                 # check the tail, and this store once
    assert len(calls) == 2


def test_a_large_session_is_parsed_in_bulk_and_a_warm_load_parses_nothing(
        store: FsStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # ~1M tokens: 5,000 messages, ~4.5 MB of JSON. (Load times: benchmarks/bench_prepare.py.)
    messages = []
    for i in range(5000):
        if i % 2:
            messages.append(Message(role="tool", tool_call_id=f"c{i}", content="y" * 800,
                                    raw_content="y" * 1600))
        else:
            messages.append(Message(role="assistant", content="z" * 300, tool_calls=(
                ToolCall(id=f"c{i + 1}", name="bash", arguments='{"cmd":"ls"}'),)))
    store.create("big")
    store.append("big", messages)
    from ctxfold.plugins.stores import fs_lines

    parsed: list[int] = []
    real = fs_lines.json.loads

    def loads(text, *args, **kwargs):
        parsed.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(fs_lines.json, "loads", loads)
    assert FsStore(store.root).load("big") == messages
    assert len(parsed) == 1  # one json.loads for all 5,000 lines, not one per line
    warm = FsStore(store.root)
    warm.load("big")
    parsed.clear()
    assert warm.load("big") == messages and parsed == []  # unchanged file: one stat


def test_a_huge_line_is_parsed_on_its_own_not_copied_into_the_bulk_parse(
        store: FsStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxfold.plugins.stores import fs_lines

    monkeypatch.setattr(fs_lines, "BIG_LINE", 10_000)
    huge = Message(role="user", content="h" * 50_000)
    store.create("s")
    store.append("s", _msgs(3))
    store.append("s", [huge])
    store.append("s", _msgs(2, start=3))
    parsed: list[str] = []
    real = fs_lines.json.loads
    monkeypatch.setattr(fs_lines.json, "loads",
                        lambda text, *a, **k: parsed.append(text) or real(text, *a, **k))
    assert FsStore(store.root).load("s") == [*_msgs(3), huge, *_msgs(2, start=3)]
    big = [t for t in parsed if len(t) > 10_000]
    assert len(big) == 1 and big[0].startswith("{")  # alone, not inside a joined "[...]"
    assert len(parsed) == 3  # the runs before and after it in bulk


# -- fork / rewind / delete --------------------------------------------------------------------


def test_fork_copies_prefix_bytes_and_a_sidecar_without_projection(store: FsStore) -> None:
    store.create("src")
    store.append("src", _msgs(2))
    store.append("src", _msgs(3, start=2))
    store.write_sidecar("src", b'{"schema_version": 3}\n')
    store.fork("src", "all")
    store.fork("src", "two", upto=2)
    store.fork("src", "four", upto=4)
    store.fork("src", "none", upto=0)
    assert store.load("all") == _msgs(5)
    assert store.load("two") == _msgs(2)
    assert store.load("four") == _msgs(4)
    assert store.load("none") == []
    src = (store.root / "src.jsonl").read_bytes()
    assert src.startswith((store.root / "two.jsonl").read_bytes())  # cut between batches
    # cut inside a batch: its kept lines become a batch of their own, not a torn tail
    four = (store.root / "four.jsonl").read_bytes().splitlines()
    assert four[2].startswith(b'{"batch":"1/2",') and four[3].startswith(b'{"batch":"2/2",')
    assert FsStore(store.root).load("four") == _msgs(4)
    assert store.read_sidecar("two") == b'{"schema_version": 3}\n'  # no projection: it fits
    assert json.loads((store.root / "two.parent.json").read_bytes())["parent"] == "src"
    assert store.load("src") == _msgs(5)  # the source is untouched
    with pytest.raises(SessionError, match="already exists"):
        store.fork("src", "two")
    with pytest.raises(SessionError, match="upto=6"):
        store.fork("src", "bad", upto=6)
    assert not store.exists("bad")
    assert not [p for p in store.root.iterdir() if p.name.endswith(".tmp")]


def test_rewind_truncates_and_discards_only_a_sidecar_that_no_longer_fits(
    store: FsStore,
) -> None:
    store.create("s")
    store.append("s", _msgs(6))
    store.write_sidecar("s", json.dumps({"projection": {"covered_count": 3}}).encode())
    store.rewind("s", 4)  # the projection covers 3 <= 4: the checkpoint is kept
    assert store.load("s") == _msgs(4)
    assert FsStore(store.root).load("s") == _msgs(4)
    assert store.read_sidecar("s") is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an explicit rewind is not a repair: no warning
        store.rewind("s", 2)
    assert store.read_sidecar("s") is None
    assert len(list(store.root.glob("s.context.json.invalid-*"))) == 1
    store.rewind("s", 0)
    assert store.load("s") == []
    with pytest.raises(SessionError, match="from 0 to 0"):
        store.rewind("s", 1)
    with pytest.raises(SessionError):
        store.rewind("s", -1)


def test_delete_removes_every_file_of_the_session_only(store: FsStore) -> None:
    for sid in ("a", "a.jsonl", "a.context.json.invalid-x", "ab"):
        store.create(sid)
        store.append(sid, _msgs(1))
        store.write_sidecar(sid, b"{}")
    with pytest.warns(StoreWarning):
        store.discard_sidecar("a", "test")
    store.write_sidecar("a", b"{}")
    with (store.root / "a.jsonl").open("ab") as handle:
        handle.write(b"{torn")
    with pytest.warns(StoreWarning):
        FsStore(store.root).load("a")
    (store.root / ".a.context.json.abc123.tmp").write_bytes(b"")  # a crashed atomic write
    (store.root / "a.prefix").write_bytes(b"\0" * 52)  # the vouched-prefix cache
    store.delete("a")
    assert not (store.root / "a.prefix").exists()
    names = sorted(p.name for p in store.root.iterdir())
    assert not [n for n in names if n.startswith(("a.context.json.invalid-2", ".a."))]
    assert "a.jsonl" not in names and "a.context.json" not in names and "a.lock" not in names
    assert "a.jsonl.corrupt" not in names
    assert store.list_sessions() == ["a.context.json.invalid-x", "a.jsonl", "ab"]
    for sid in store.list_sessions():
        assert store.load(sid) == _msgs(1) and store.read_sidecar(sid) == b"{}"
    assert not store.exists("a")
    with pytest.raises(SessionError):
        store.load("a")


# -- sidecar files -----------------------------------------------------------------------------


def test_sidecar_write_read_and_atomic_failure(
    store: FsStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create("s")
    assert store.read_sidecar("s") is None
    store.write_sidecar("s", b'{"old": true}\n')
    assert store.read_sidecar("s") == b'{"old": true}\n'

    def boom(*_a: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="No space"):
        store.write_sidecar("s", b'{"new": true}\n')
    monkeypatch.undo()
    assert store.read_sidecar("s") == b'{"old": true}\n'
    assert sorted(p.name for p in store.root.iterdir()) == ["s.context.json", "s.jsonl", "s.lock"]


def test_unreadable_sidecar_raises_sidecar_error(store: FsStore) -> None:
    store.create("s")
    (store.root / "s.context.json").mkdir()  # a directory where the file should be
    with pytest.raises(SidecarError, match=r"s\.context\.json"):
        store.read_sidecar("s")
    with pytest.warns(StoreWarning, match="broken"):
        store.discard_sidecar("s", "broken")
    assert store.read_sidecar("s") is None


def test_discard_keeps_the_file_for_audit(store: FsStore) -> None:
    store.create("s")
    store.discard_sidecar("s", "nothing to discard")  # no sidecar: no-op, no warning
    store.write_sidecar("s", b"first")
    with pytest.warns(StoreWarning, match="invalid JSON"):
        store.discard_sidecar("s", "invalid JSON")
    store.write_sidecar("s", b"second")
    with pytest.warns(StoreWarning):
        store.discard_sidecar("s", "again")
    kept = sorted(store.root.glob("s.context.json.invalid-*"))
    assert [p.read_bytes() for p in kept] == [b"first", b"second"]
    assert all(_mode(p) == 0o600 for p in kept)


def test_last_activity_is_transcript_mtime(store: FsStore) -> None:
    store.create("s")
    store.append("s", _msgs(1))
    os.utime(store.root / "s.jsonl", (1_000_000, 1_000_000))
    store.write_sidecar("s", b"{}")  # resume telemetry must not look like activity
    assert store.last_activity("s") == 1_000_000
    store.append("s", _msgs(1))
    activity = store.last_activity("s")
    assert activity is not None and abs(activity - time.time()) < 60


# -- plugin registration -----------------------------------------------------------------------


def test_registered_as_store_fs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = Config(store=StoreConfig(name="fs", path="data/sessions"))
    registry = Registry.from_config(load_entry_points=False)
    store = registry.create(STORE, "fs", config=config)
    assert isinstance(store, FsStore) and isinstance(store, Store)
    assert store.root == tmp_path / "data" / "sessions"
    store.create("x")
    assert (tmp_path / "data" / "sessions" / "x.jsonl").exists()
    override = registry.create(STORE, "fs", config=config, options=StoreOptions(path="o"))
    assert override.root == tmp_path / "o"


def test_a_stored_lone_surrogate_is_repaired_on_read_and_the_file_kept(tmp_path: Path) -> None:
    """A transcript written before lone surrogates were refused opens, prepares, shows and
    inspects; every read path sees U+FFFD, and the bytes on disk are not rewritten."""
    import ctxfold
    from ctxfold.cli.main import main

    cm = ctxfold.open_session("s", store_path=str(tmp_path), summarize=lambda r: "x")
    cm.append({"role": "user", "content": "hi"})
    path = tmp_path / "s.jsonl"
    with path.open("a") as f:
        f.write('{"role":"assistant","content":"oops \\ud800 and \\ud83d\\ude00"}\n')
    before = path.read_bytes()
    again = ctxfold.open_session("s", store_path=str(tmp_path), summarize=lambda r: "x")
    assert again.canonical[-1].content == "oops \ufffd and \U0001f600"
    again.prepare()
    for argv in (["sessions", "show", "s"], ["inspect", "s", "--view"], ["sessions", "list"],
                 ["tool-result", "s", "nope"]):
        code = main([*argv, "--root", str(tmp_path)])
        assert code in (0, 1), argv  # a ctxfold error at worst, never a traceback
    assert path.read_bytes() == before


@pytest.mark.parametrize("cut_lines", [1, 2])
def test_a_batch_torn_at_a_line_boundary_lands_not_at_all(store: FsStore, cut_lines: int
                                                           ) -> None:
    """A crash that ended the write exactly after a line used to leave an assistant tool call
    without its result (or half a batch) looking like a complete transcript."""
    call = Message(role="assistant", tool_calls=(ToolCall(id="c1", name="ls", arguments="{}"),))
    batch = [call, Message(role="tool", tool_call_id="c1", content="a.py"),
             Message(role="assistant", content="done")]
    store.create("s")
    store.append("s", _msgs(1))
    store.append("s", batch)
    path = store.root / "s.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[: 1 + cut_lines]))  # the batch's last lines never landed
    with pytest.warns(StoreWarning, match="unfinished"):
        assert FsStore(store.root).load("s") == _msgs(1)
    assert path.read_bytes() == lines[0]
    assert (store.root / "s.jsonl.corrupt").read_bytes() == b"".join(lines[1: 1 + cut_lines])
    fresh = FsStore(store.root)
    fresh.append("s", batch)  # the next append writes after the whole first message only
    assert FsStore(store.root).load("s") == [*_msgs(1), *batch]


def test_appending_after_an_unfinished_batch_repairs_first(store: FsStore) -> None:
    store.create("s")
    store.append("s", _msgs(3))
    path = store.root / "s.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2]))
    with pytest.warns(StoreWarning):
        FsStore(store.root).append("s", _msgs(1, start=7))
    assert FsStore(store.root).load("s") == _msgs(1, start=7)  # no partial batch in the middle


def _leftover(path: Path, age: float) -> Path:
    path.write_bytes(b"half a write")
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))
    return path


def test_temp_files_of_killed_writes_are_removed_by_the_next_write(store: FsStore) -> None:
    store.create("s")
    store.append("s", _msgs(2))
    root = store.root
    dead = [_leftover(root / ".s.context.json.k2j3h4.tmp", 3_600),
            _leftover(root / ".s.jsonl.9xq7w.tmp", 3_600),
            _leftover(root / ".s.jsonl.new123x456.tmp", 3_600)]
    live = _leftover(root / ".s.context.json.fresh1.tmp", 0)  # a write in flight
    other = _leftover(root / ".t.context.json.old.tmp", 3_600)  # another session's

    fresh = FsStore(root)  # a new process
    fresh.load("s")
    fresh.read_sidecar("s")
    assert all(p.exists() for p in dead)  # reading removes nothing
    fresh.write_sidecar("s", b"{}")
    assert not any(p.exists() for p in dead)
    assert live.exists() and other.exists()


def test_a_session_held_by_filelock_elsewhere_is_waited_for_then_refused(
        tmp_path, monkeypatch) -> None:
    """The session lock is an exclusive flock on POSIX: a holder that takes it with
    filelock (another process, an older ctxfold) excludes this one, which waits and then
    says who holds what."""
    import filelock

    import ctxfold.plugins.stores.fs as fs_module
    from ctxfold import Message, StoreError
    from ctxfold.plugins.stores.fs import FsStore

    store = FsStore(tmp_path)
    store.create("s")
    monkeypatch.setattr(fs_module, "LOCK_TIMEOUT", 0.2)
    holder = filelock.FileLock(tmp_path / "s.lock")
    with holder, pytest.raises(StoreError, match=r"session 's': lock .*s\.lock is held"):
        store.append("s", [Message(role="user", content="blocked")])
    store.append("s", [Message(role="user", content="after")])
    assert [m.content for m in store.load("s")] == ["after"]
