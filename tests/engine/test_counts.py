"""Token counts persisted with the session: reopening does not re-tokenize it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxfold import Message, TextStats
from ctxfold import open_session as open_real
from ctxfold.engine.counts import decode_counts, encode_counts
from ctxfold.plugins.estimators.heuristic import HeuristicEstimator


def open_session(session_id: str, **kwargs: object):  # type: ignore[no-untyped-def]
    return open_real(session_id, summarize=lambda _request: "## Goal\n- g", **kwargs)


class Counting(HeuristicEstimator):
    """Counts how many messages it really measured (cache misses on both levels)."""

    def __init__(self, version: str = "1") -> None:
        super().__init__()
        self.count_version = version
        self.measured = 0

    def _measure_message(self, message: Message) -> TextStats:
        self.measured += 1
        return super()._measure_message(message)


def fill(path: Path, n: int = 60) -> int:
    cm = open_session("s1", store_path=str(path), estimator=Counting(), window=1_000_000)
    cm.append(Message(role="system", content="You are terse."))
    for i in range(n):
        cm.append(Message(role="user", content=f"question {i} " * 20),
                  Message(role="assistant", content=f"answer {i} " * 30))
    return cm.prepare().tokens


def test_reopening_counts_nothing_again(tmp_path: Path) -> None:
    tokens = fill(tmp_path)
    est = Counting()
    again = open_session("s1", store_path=str(tmp_path), estimator=est, window=1_000_000)
    assert again.prepare().tokens == tokens
    assert est.measured == 0  # every message's count came from the stored record
    again.append(Message(role="user", content="one more"))
    again.prepare()
    assert est.measured == 1


def test_another_estimator_version_counts_again(tmp_path: Path) -> None:
    fill(tmp_path, n=10)
    est = Counting(version="2")
    open_session("s1", store_path=str(tmp_path), estimator=est, window=1_000_000).prepare()
    assert est.measured == 21  # the record of version 1 is not read by version 2
    assert len(list(tmp_path.glob("s1.tokens-*"))) == 2


def test_a_corrupt_record_only_costs_a_recount(tmp_path: Path) -> None:
    tokens = fill(tmp_path, n=10)
    (record,) = tmp_path.glob("s1.tokens-*")
    data = record.read_bytes()
    record.write_bytes(b"garbage\n\xff\xfe" + data[: len(data) // 2] + b"0123 torn")
    est = Counting()
    cm = open_session("s1", store_path=str(tmp_path), estimator=est, window=1_000_000)
    assert cm.prepare().tokens == tokens
    assert 0 < est.measured < 21


def test_delete_removes_the_record(tmp_path: Path) -> None:
    fill(tmp_path, n=3)
    cm = open_session("s1", store_path=str(tmp_path), window=1_000_000)
    cm.store.delete("s1")
    assert list(tmp_path.glob("s1*")) == []


def test_damaged_records_are_skipped() -> None:
    good = {"a" * 32: TextStats(5, 20, 0), "b" * 32: TextStats(7, 30, 2)}
    data = bytearray(encode_counts(good))
    assert decode_counts(bytes(data)) == good
    data[40] ^= 0xFF  # a damaged second record
    assert decode_counts(bytes(data) + b"torn") == {"a" * 32: TextStats(5, 20, 0)}


@pytest.mark.parametrize("stats", [TextStats(-1, 2, 3), TextStats(1, 2**32, 0)])
def test_counts_the_format_cannot_hold_are_not_written(stats: TextStats) -> None:
    assert encode_counts({"c" * 32: stats, "nothex": TextStats(1, 1, 0)}) == b""
