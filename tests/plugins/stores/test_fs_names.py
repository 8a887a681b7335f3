"""The ``fs`` store names every file of a session so that no other valid session id can
own it: deleting (or sweeping the temp files of) one session never touches another's files
(issue: ``sessions delete a`` also deleted session ``a.tokens-x``)."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxfold import Message, StoreError
from ctxfold.plugins.stores.copying import copy_session
from ctxfold.plugins.stores.fs import FsStore
from ctxfold.plugins.stores.fs_sidecar import StoreWarning
from ctxfold.session_id import validate_count_key, validate_session_id

ALPHABET = "ab0._-"
#: What a neighbour's id may add after ``<id>.``: every side-file suffix the store uses, and
#: pieces of them, so the generated ids sit exactly where the old patterns matched.
SUFFIXES = ["tokens-x", "tokens-est-1-abc", "context", "context.json", "jsonl", "prefix",
            "lock", "parent", "parent.json", "jsonl.corrupt", "corrupt", "tmp", "new1x2",
            "context.json.invalid-20260101T000000000000Z", "invalid-20260101T000000000000Z",
            "abc123"]
OLD = time.time() - 3600


def _ids() -> st.SearchStrategy[str]:
    plain = st.text(ALPHABET, min_size=0, max_size=6).map(lambda s: "a" + s)
    return plain.filter(_valid)


def _valid(session_id: str) -> bool:
    try:
        validate_session_id(session_id)
    except Exception:
        return False
    return True


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}


def _populate(store: FsStore, session_id: str, *, fork_of: str = "") -> None:
    """Every kind of file a session can have: transcript, sidecar, a discarded sidecar, a
    torn tail moved aside, token counts, a vouched prefix, a fork record (``fork_of``), stale
    temp files of killed writes, and the lock."""
    if fork_of:
        store.fork(fork_of, session_id, 0)
    else:
        store.create(session_id)
    store.append(session_id, [Message(role="user", content=session_id)])
    store.write_sidecar(session_id, b"{}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoreWarning)
        store.discard_sidecar(session_id, "test")
        with store.transcript_path(session_id).open("ab") as handle:
            handle.write(b"{torn")
        store.load(session_id)  # moves the torn tail to <id>.jsonl.corrupt
    store.write_sidecar(session_id, b"{}")
    store.append_counts(session_id, "est-1-abc", b"counts")
    (store.root / f"{session_id}.prefix").write_bytes(b"\0" * 52)
    for name in (f".{session_id}.jsonl.abc123.tmp", f".{session_id}.context.json.q1w2.tmp"):
        temp = store.root / name
        temp.write_bytes(b"")
        os.utime(temp, (OLD, OLD))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=_ids(), others=st.lists(st.one_of(_ids(), st.sampled_from(SUFFIXES)),
                                    min_size=1, max_size=4))
def test_deleting_a_session_never_touches_another_sessions_files(
        tmp_path_factory: pytest.TempPathFactory, base: str, others: list[str]) -> None:
    root = tmp_path_factory.mktemp("names")
    store = FsStore(root)
    # Neighbours: arbitrary ids, and ids made of the base id and a side-file suffix.
    neighbours = sorted({sid for other in others
                         for sid in (other, f"{base}.{other}") if _valid(sid)} - {base})
    for sid in neighbours:
        _populate(store, sid)
    store.create("zseed")
    _populate(store, base, fork_of="zseed")
    kept = _snapshot(root)
    mine = _files_of(store, base, kept)
    FsStore(root).append(base, [Message(role="user", content="x")])  # sweeps base's temps
    FsStore(root).delete(base)
    after = _snapshot(root)
    for name, data in kept.items():
        if name not in mine:
            assert after.get(name) == data, f"deleting {base!r} touched {name!r}"
    assert not set(after) & mine, f"deleting {base!r} left {sorted(set(after) & mine)}"
    assert base not in FsStore(root).list_sessions()
    assert FsStore(root).list_sessions() == sorted([*neighbours, "zseed"])
    for sid in neighbours:
        assert FsStore(root).load(sid, repair=False)[0].content == sid


def _files_of(store: FsStore, session_id: str, names: dict[str, bytes]) -> set[str]:
    """The files session ``session_id`` owns, by the names the store gives them."""
    exact = {f"{session_id}.{s}" for s in ("jsonl", "context.json", "jsonl.corrupt", "prefix",
                                           "lock", "tokens-est-1-abc", "parent.json")}
    exact |= {f".{session_id}.jsonl.abc123.tmp", f".{session_id}.context.json.q1w2.tmp"}
    invalid = f"{session_id}.context.json.invalid-"
    return {n for n in names if n in exact or (n.startswith(invalid) and "." not in
                                               n[len(invalid):])}


def test_a_session_named_like_a_side_file_survives_the_delete_of_its_namesake(
        tmp_path: Path) -> None:
    """The case the issue found: deleting ``a`` deleted ``a.tokens-x`` (transcript and lock)."""
    store = FsStore(tmp_path)
    for sid in ("a", "a.tokens-x"):
        _populate(store, sid)
    store.delete("a")
    assert store.list_sessions() == ["a.tokens-x"]
    assert store.load("a.tokens-x")[0].content == "a.tokens-x"
    assert (tmp_path / "a.tokens-x.lock").exists()
    assert store.read_counts("a.tokens-x", "est-1-abc") == b"counts"


def test_sweeping_a_sessions_temp_files_leaves_a_neighbours_alone(tmp_path: Path) -> None:
    store = FsStore(tmp_path)
    _populate(store, "a")
    _populate(store, "a.b")
    FsStore(tmp_path).append("a", [Message(role="user", content="x")])
    assert (tmp_path / ".a.b.jsonl.abc123.tmp").exists()
    assert not (tmp_path / ".a.jsonl.abc123.tmp").exists()


def test_store_copy_cleanup_deletes_only_the_failed_copy(tmp_path: Path) -> None:
    source = FsStore(tmp_path / "source")
    _populate(source, "a")
    target = FsStore(tmp_path / "target")
    _populate(target, "a.tokens-x")

    class Broken(FsStore):
        def write_sidecar(self, session_id: str, data: bytes) -> None:
            raise StoreError("disk full")

    with pytest.raises(StoreError, match="disk full"):
        copy_session(source, Broken(target.root), "a")
    assert FsStore(target.root).list_sessions() == ["a.tokens-x"]
    assert FsStore(target.root).load("a.tokens-x")[0].content == "a.tokens-x"


@pytest.mark.parametrize("key", ["est.1", "a.lock", "x.jsonl"])
def test_token_count_keys_cannot_hold_a_dot(key: str) -> None:
    """A dot in a key would let ``<id>.tokens-<key>`` end like another session's file."""
    with pytest.raises(StoreError, match="invalid token-count key"):
        validate_count_key(key)
