"""Reopening a long session decodes only what its checkpoint does not cover (fs store)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxfold import Message, StoreError, ToolCall, Transcript
from ctxfold import open_session as open_real
from ctxfold.engine.transcript import CallIds, count_role, with_role
from ctxfold.kernel import fingerprint as fp
from ctxfold.kernel.fingerprint import chain_hash
from ctxfold.kernel.summary import LOOKUP_TOOL_OUTPUTS
from ctxfold.plugins.stores.fs import FsStore
from ctxfold.plugins.stores.fs_prefix import decode_records

ROUNDS = 120


def open_session(path: Path, **kwargs: object):  # type: ignore[no-untyped-def]
    return open_real("s", store_path=str(path), summarize=lambda _r: "## Goal\n- g",
                     window=32_000, **kwargs)


def build(path: Path, rounds: int = ROUNDS) -> tuple[Message, ...]:
    """A session of tool rounds with one manual checkpoint (covering most of it)."""
    cm = open_session(path)
    cm.append(Message(role="system", content="You are a coding agent."),
              Message(role="user", content="Fix the tests."))
    for i in range(rounds):
        cm.append(Message(role="assistant", content=f"step {i}",
                          tool_calls=(ToolCall(id=f"c{i}", name="bash", arguments="{}"),)),
                  Message(role="tool", content=f"output {i} " * 40, tool_call_id=f"c{i}",
                          name="bash"))
    assert cm.compact().action.value == "summary"
    assert cm.state.projection is not None and cm.state.projection.covered_count > 64
    return cm.canonical


def test_reopening_decodes_only_the_uncovered_tail(tmp_path: Path) -> None:
    original = build(tmp_path)
    records = decode_records((tmp_path / "s.prefix").read_bytes())
    assert records and records[-1].lines > 64
    cm = open_session(tmp_path)
    assert cm.notices == []
    transcript = cm._canonical
    assert isinstance(transcript, Transcript)
    covered = cm.state.projection.covered_count  # type: ignore[union-attr]
    assert transcript.undecoded == covered == records[-1].lines
    cm.resume()
    cm.prepare()
    assert cm.turn == ROUNDS  # counted from the lines' roles
    assert transcript.undecoded >= covered - 4  # head and the last covered message at most
    assert cm.canonical == original  # decoding the rest gives the same messages
    assert transcript.undecoded == 0


def test_a_result_for_a_call_in_the_covered_prefix_is_still_paired(tmp_path: Path) -> None:
    build(tmp_path)
    cm = open_session(tmp_path)
    cm.append(Message(role="tool", content="late", tool_call_id="c3", name="bash"))
    with pytest.raises(Exception, match="answers no tool call"):
        cm.append(Message(role="tool", content="x", tool_call_id="nope", name="bash"))


def test_the_first_fold_after_reopening_hashes_only_new_messages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build(tmp_path)
    cm = open_session(tmp_path)
    for i in range(30):
        cm.append(Message(role="user", content=f"more {i} " * 50),
                  Message(role="assistant", content=f"ok {i}"))
    hashed: list[int] = []
    real = fp.chain_hash

    def counting(messages, start=""):  # type: ignore[no-untyped-def]
        messages = list(messages)
        hashed.append(len(messages))
        return real(messages, start)

    monkeypatch.setattr(fp, "chain_hash", counting)
    before = cm.state.projection.covered_count  # type: ignore[union-attr]
    assert cm.compact().action.value == "summary"
    after = cm.state.projection.covered_count  # type: ignore[union-attr]
    assert hashed == [after - before]  # extended from the vouched hash, not rehashed
    # Decoded from the vouched prefix: the head and, for the lookup hint, at most the newest
    # folded tool outputs with their calls: bounded, not the whole prefix.
    assert before - cm._canonical.undecoded <= 3 + 2 * (LOOKUP_TOOL_OUTPUTS + 1) < before
    assert cm.state.projection.covered_prefix_hash == chain_hash(  # type: ignore[union-attr]
        list(cm.canonical[:after]))


def _rewrite_line(path: Path, index: int, change) -> None:  # type: ignore[no-untyped-def]
    lines = path.read_bytes().split(b"\n")
    lines[index] = change(lines[index])
    path.write_bytes(b"\n".join(lines))


def test_changed_covered_bytes_are_never_vouched_for(tmp_path: Path) -> None:
    build(tmp_path)
    transcript = tmp_path / "s.jsonl"

    def edit(line: bytes) -> bytes:
        data = json.loads(line)
        data["content"] = "edited by hand"
        return json.dumps(data, separators=(",", ":")).encode()

    _rewrite_line(transcript, 10, edit)
    cm = open_session(tmp_path)
    assert cm._canonical.undecoded == 0  # parsed whole, as before
    assert cm.state.projection is None and "no longer matches" in " ".join(cm.notices)
    assert cm.canonical[10].content == "edited by hand"


def test_corruption_inside_the_covered_prefix_names_its_line(tmp_path: Path) -> None:
    build(tmp_path)
    _rewrite_line(tmp_path / "s.jsonl", 20, lambda line: line[:-5] + b"!!!!!")
    with pytest.raises(StoreError, match=r"line 21: invalid JSON"):
        open_session(tmp_path)


def test_a_damaged_prefix_record_only_costs_a_full_parse(tmp_path: Path) -> None:
    original = build(tmp_path)
    (tmp_path / "s.prefix").write_bytes(b"\x00garbage" * 9)
    cm = open_session(tmp_path)
    assert cm._canonical.undecoded == 0 and cm.canonical == original
    assert cm.state.projection is not None and cm.notices == []
    # the open vouched again, so the next one is lazy again
    assert open_session(tmp_path)._canonical.undecoded > 64


def test_a_huge_prefix_file_costs_a_bounded_read(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxfold.plugins.stores import fs_prefix

    build(tmp_path)
    good = (tmp_path / "s.prefix").read_bytes()
    (tmp_path / "s.prefix").write_bytes(b"\xff" * 3_000_000 + good)
    read: list[int] = []
    real = fs_prefix.decode_records
    monkeypatch.setattr(fs_prefix, "decode_records", lambda data: read.append(len(data))
                        or real(data))
    assert open_session(tmp_path)._canonical.undecoded > 64  # the newest records still count
    assert read and max(read) < (fs_prefix.RECORDS_READ + 1) * fs_prefix.RECORD_SIZE


def test_a_rewind_below_the_covered_prefix_is_not_vouched_for(tmp_path: Path) -> None:
    build(tmp_path)
    cm = open_session(tmp_path)
    cm.rewind(40)
    cm.append(Message(role="user", content="a different path"))
    reopened = open_session(tmp_path)
    assert reopened._canonical.undecoded == 0
    assert len(reopened.canonical) == 41
    assert reopened.canonical[-1].content == "a different path"


def test_a_vouch_for_an_older_revision_writes_nothing(tmp_path: Path) -> None:
    build(tmp_path)
    store = FsStore(tmp_path)
    before = (tmp_path / "s.prefix").read_bytes()
    store.vouch_prefix("s", 100, "ab" * 16, "0:0:0")
    assert (tmp_path / "s.prefix").read_bytes() == before


def test_a_lone_surrogate_in_a_covered_line_is_repaired_when_decoded(tmp_path: Path) -> None:
    build(tmp_path)
    cm = open_session(tmp_path)
    assert cm._canonical.undecoded > 64
    lines = (tmp_path / "s.jsonl").read_bytes()
    assert lines  # the stored form of an escaped surrogate decodes through the same repair
    from ctxfold.plugins.stores.fs_prefix import _Lines

    data = b'{"role":"user","content":"bad \\udc80 text"}\n'
    lazy = _Lines(data, __import__("array").array("q", [len(data)]), tmp_path / "x.jsonl")
    assert lazy.roles() == ["user"]
    assert "\udc80" not in lazy.decode(0).content


def test_a_bad_covered_line_is_a_store_error_naming_it(tmp_path: Path) -> None:
    from array import array

    from ctxfold.plugins.stores.fs_prefix import _Lines

    data = b'{"role":"user","content":"ok"}\n{"role":"user",\n'
    lazy = _Lines(data, array("q", [31, len(data)]), tmp_path / "x.jsonl")
    assert lazy.decode(0).content == "ok"
    with pytest.raises(StoreError, match=r"x\.jsonl line 2"):
        lazy.decode(1)


class _Fake:
    """Lines whose roles are known but whose messages count decodes."""

    def __init__(self, messages: list[Message], shown: bool = True) -> None:
        self.messages, self.shown, self.decoded = messages, shown, 0

    def __len__(self) -> int:
        return len(self.messages)

    def decode(self, index: int) -> Message:
        self.decoded += 1
        return self.messages[index]

    def roles(self) -> list[str]:
        return [m.role if self.shown else "" for m in self.messages]


def _messages() -> list[Message]:
    out = [Message(role="user", content="task")]
    for i in range(10):
        out += [Message(role="assistant", content="",
                        tool_calls=(ToolCall(id=f"k{i}", name="t", arguments="{}"),)),
                Message(role="tool", content=f"r{i}", tool_call_id=f"k{i}", name="t")]
    return out


@pytest.mark.parametrize("shown", [True, False])
def test_transcript_reads_like_the_list_it_stands_for(shown: bool) -> None:
    messages = _messages()
    lazy = _Fake(messages[:15], shown)
    t = Transcript(messages[15:], lazy=lazy)
    assert count_role(t, "assistant") == 10 and count_role(t, "tool") == 10
    assert lazy.decoded == (0 if shown else 15)
    assert [i for i, _m in with_role(t, "user")] == [0]
    assert t[3] == messages[3] and t[-1] == messages[-1] and t[2:5] == messages[2:5]
    assert list(t) == messages and len(t) == len(messages)
    with pytest.raises(IndexError):
        t[len(messages)]
    t.extend([Message(role="user", content="next")])
    assert t[-1].content == "next" and t.undecoded == 0


def test_call_ids_decode_the_prefix_only_for_an_unknown_id() -> None:
    messages = _messages()
    lazy = _Fake(messages[:15])
    ids = CallIds(Transcript(messages[15:], lazy=lazy))
    assert "k9" in ids and lazy.decoded == 0  # a call in the decoded tail
    assert "k1" in ids and lazy.decoded > 0  # found in the prefix, decoded on the miss
    assert "nope" not in ids
