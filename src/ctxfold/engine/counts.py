"""Token counts kept with the session, so reopening it does not re-tokenize it.

A store that implements :class:`~ctxfold.kernel.contracts.CountStore` keeps, per session and
per estimator ``count_key``, an append-only record of raw per-message counts: one 32-byte record per
counted message (its fingerprint, tokens, chars and CJK chars, and a CRC-32). On open the engine
seeds the estimator with them (a message whose fingerprint is known is never tokenized
again); after each ``prepare()`` it appends the counts measured since. The record is a cache:
a torn or damaged record is skipped, a missing or unreadable record costs one re-tokenization,
and another estimator (or another version of one: a different ``count_key``) never reads it.
It is not session state — writing it is not one of the writes design §2.4 forbids below the
trigger (no projection, sidecar, summary or event).
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterator, Mapping
from contextlib import suppress
from typing import Any

from ctxfold.kernel.contracts import CountingEstimator, CountStore
from ctxfold.kernel.errors import StoreError
from ctxfold.kernel.types import TextStats
from ctxfold.session_id import validate_count_key

_HEX = re.compile(r"[0-9a-f]{32}\Z")


#: One record: the 16 fingerprint bytes, tokens, chars, CJK chars (uint32 each) and the
#: CRC-32 of those 28 bytes — so a torn or foreign record is recognised and skipped.
_RECORD = struct.Struct("<16sIII")
_CRC = struct.Struct("<I")
RECORD_SIZE = _RECORD.size + _CRC.size
_MAX = 2**32 - 1


def encode_counts(counts: Mapping[str, TextStats]) -> bytes:
    """The records of ``counts`` (counts too large for the format are left out)."""
    out = bytearray()
    for fp, s in counts.items():
        if _HEX.match(fp) and min(s.tokens, s.chars, s.cjk) >= 0 and max(
                s.tokens, s.chars, s.cjk) <= _MAX:
            out += frame(_RECORD, bytes.fromhex(fp), s.tokens, s.chars, s.cjk)
    return bytes(out)


def frame(record: struct.Struct, *values: Any) -> bytes:
    """One framed record: ``values`` packed as ``record``, then the CRC-32 of those bytes."""
    body = record.pack(*values)
    return body + _CRC.pack(zlib.crc32(body))


def framed(data: bytes, record: struct.Struct) -> Iterator[tuple[Any, ...]]:
    """The values of the :func:`frame` records in ``data``; a torn tail or damaged bytes are
    skipped (after a record that fails its CRC the next one is searched byte by byte)."""
    view, size = memoryview(data), record.size
    step = size + _CRC.size
    crc32, crc, unpack = zlib.crc32, _CRC.unpack_from, record.unpack_from
    at = 0
    # Fast path: every record in place (the common case), each still checked.
    whole = struct.Struct(record.format + "I")
    for values in whole.iter_unpack(view[:len(view) - len(view) % step]):
        if crc32(view[at:at + size]) != values[-1]:
            break
        yield values[:-1]
        at += step
    end = len(view) - step
    while at <= end:
        if crc32(view[at:at + size]) != crc(view, at + size)[0]:
            at += 1
            continue
        yield unpack(view, at)
        at += step


class _Counts(Mapping[str, TextStats]):
    """Decoded records: fingerprint → (tokens, chars, CJK chars), made stats on lookup (a
    50,000-message session's record is read without building 50,000 objects)."""

    def __init__(self, raw: dict[str, tuple[int, int, int]]) -> None:
        self._raw = raw

    def __getitem__(self, key: str) -> TextStats:
        return TextStats(*self._raw[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


def decode_counts(data: bytes) -> Mapping[str, TextStats]:
    """The counts of a record file (:func:`framed`: damaged records are skipped)."""
    return _Counts({fp.hex(): (tokens, chars, cjk)
                    for fp, tokens, chars, cjk in framed(data, _RECORD)})


class PersistedCounts:
    """The count record of one open session: seeded on open, extended after prepare."""

    def __init__(self, store: object, session_id: str, estimator: object) -> None:
        self._store: CountStore | None = None
        self._estimator: CountingEstimator | None = None
        self.session_id = session_id
        self.key = ""
        if not (isinstance(store, CountStore) and isinstance(estimator, CountingEstimator)):
            return
        key = estimator.count_key
        try:
            validate_count_key(key)
        except StoreError:
            return  # a third-party key no store could name: count without the cache
        self._store, self._estimator, self.key = store, estimator, key
        try:
            known = decode_counts(store.read_counts(session_id, key))
        except (StoreError, OSError):
            known = {}  # a cache: counting again is the fallback
        estimator.seed_counts(known)

    def save(self) -> None:
        """Append what the estimator counted since the last save."""
        if self._store is None or self._estimator is None:
            return
        new = self._estimator.take_new_counts()
        # A cache: when the write fails, the next open counts these messages again.
        if new:
            with suppress(StoreError, OSError):
                self._store.append_counts(self.session_id, self.key, encode_counts(new))
