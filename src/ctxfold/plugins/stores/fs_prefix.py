"""The vouched prefixes of the ``fs`` store: reopening a long session without decoding it.

``<id>.prefix`` is a cache next to the transcript: append-only records, one per vouch, of
``(count, end, digest, prefix hash)`` — the first ``count`` message lines end at byte
``end``, those bytes have SHA-256 ``digest`` (first 16 bytes), and the engine hashed those
messages to the covered-prefix ``prefix hash`` — each with a CRC-32, so a torn or damaged
record is skipped. On open the furthest record whose digest matches the transcript's
current bytes (one SHA-256 pass, ~30 ms for 47 MB) vouches for that prefix: its lines are
kept undecoded (:class:`~ctxfold.engine.transcript.Transcript`) and only the rest is parsed.
Bytes that changed (a rewind, an edit) match no record, and the whole file is parsed as
before; a missing or unreadable record costs exactly that.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ctxfold.engine.counts import frame, framed
from ctxfold.engine.transcript import Transcript
from ctxfold.kernel.types import Message
from ctxfold.plugins.stores.fs_files import append_plain, revision_of
from ctxfold.plugins.stores.fs_lines import decode_line, line_ends, parse_transcript
from ctxfold.session_id import validate_session_id

_RECORD = struct.Struct("<QQ16s16s")
RECORD_SIZE = _RECORD.size + 4  # and its CRC-32 (engine.counts.frame)
#: A vouched prefix shorter than this is not worth a lazy transcript.
MIN_LAZY = 64
#: How many of the newest records an open reads.
RECORDS_READ = 1024
_ROLE = re.compile(rb'\{(?:"batch":"\d+/\d+",)?"role":"(system|user|assistant|tool)"')
_HEX = re.compile(r"[0-9a-f]{32}\Z")


class Record(NamedTuple):
    lines: int
    end: int
    digest: bytes
    prefix_hash: str


def encode_record(record: Record) -> bytes:
    return frame(_RECORD, record.lines, record.end, record.digest,
                 bytes.fromhex(record.prefix_hash))


def decode_records(data: bytes) -> list[Record]:
    """The records of a prefix file; torn or damaged ones are skipped."""
    return [Record(lines, end, digest, prefix_hash.hex())
            for lines, end, digest, prefix_hash in framed(data, _RECORD)]


class _Lines:
    """The undecoded lines of a vouched prefix (implements ``LazyLines``)."""

    def __init__(self, data: bytes, ends: Sequence[int], path: Path) -> None:
        self._data, self._ends, self._path = data, ends, path
        self._roles: list[str] | None = None

    def __len__(self) -> int:
        return len(self._ends)

    def _span(self, index: int) -> tuple[int, int]:
        return (self._ends[index - 1] if index else 0), self._ends[index]

    def decode(self, index: int) -> Message:
        start, end = self._span(index)
        return decode_line(self._data[start:end], f"transcript {self._path} line {index + 1}")

    def roles(self) -> list[str]:
        if self._roles is None:
            match, data = _ROLE.match, self._data
            names: dict[bytes, str] = {}
            roles = []
            for start in (0, *self._ends[:-1]):
                found = match(data, start)
                key = found[1] if found else b""
                roles.append(names.get(key) or names.setdefault(key, key.decode()))
            self._roles = roles
        return self._roles


class _Memo(NamedTuple):
    """A hashed position of one transcript file this process knows: its inode, the message
    count and byte offset there, and the SHA-256 state of the bytes before it."""

    inode: int
    lines: int
    end: int
    sha: Any


class PrefixMemos:
    """What one store object knows of its sessions' files between calls: the last hashed
    position of each transcript, and the revision at which each was known to end cleanly."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.hashed: dict[str, _Memo] = {}
        self.clean: dict[str, str] = {}


class PrefixFiles:
    """``load_transcript`` and ``vouch_prefix`` of :class:`~ctxfold.plugins.stores.fs.FsStore`
    (the optional ``ctxfold.kernel.contracts.PrefixStore`` extension)."""

    root: Path
    _prefixes: PrefixMemos

    def _prefix_path(self, session_id: str) -> Path:
        return self.root / f"{validate_session_id(session_id)}.prefix"

    def _memo(self, session_id: str, memo: _Memo | None = None) -> _Memo | None:
        with self._prefixes.lock:
            if memo is not None:
                self._prefixes.hashed[session_id] = memo
            return self._prefixes.hashed.get(session_id)

    def known_clean(self, session_id: str, st: os.stat_result, *, clean: bool = False) -> bool:
        """Whether the transcript, at stat ``st``, is known to end in a whole batch (no torn
        tail to repair before an append); ``clean=True`` records that it does."""
        with self._prefixes.lock:
            if clean:
                self._prefixes.clean[session_id] = revision_of(st)
            return self._prefixes.clean.get(session_id) == revision_of(st)

    def _records(self, session_id: str) -> list[Record]:
        """The newest records (the last :data:`RECORDS_READ`: a file grown huge or filled
        with garbage costs a bounded read)."""
        try:
            with self._prefix_path(session_id).open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size // RECORD_SIZE - RECORDS_READ) * RECORD_SIZE)
                return decode_records(f.read())
        except OSError:
            return []  # a cache: parse the whole transcript instead

    def load_transcript(self, session_id: str) -> Transcript:
        """The transcript with its furthest vouched prefix undecoded (``load`` otherwise)."""
        st = self._stat(session_id)  # type: ignore[attr-defined]
        path: Path = self.transcript_path(session_id)  # type: ignore[attr-defined]
        records = [r for r in self._records(session_id) if r.lines >= MIN_LAZY]
        data = self._read(path) if records else b""  # type: ignore[attr-defined]
        found = _verified(data, records)
        if found is not None:
            record, sha = found
            ends = line_ends(data, record.end)
            parsed = parse_transcript(data[record.end:], path, record.lines + 1)
            if len(ends) == record.lines and not parsed.torn:
                self._memo(session_id, _Memo(st.st_ino, record.lines, record.end, sha))
                self.known_clean(session_id, st, clean=True)
                return Transcript(parsed.messages, lazy=_Lines(data, ends, path),
                                  vouched={record.lines: record.prefix_hash})
        return Transcript(self.load(session_id))  # type: ignore[attr-defined]

    def vouch_prefix(self, session_id: str, count: int, prefix_hash: str,
                     revision: str) -> None:
        """Record that the first ``count`` messages, as stored at ``revision``, hash to
        ``prefix_hash``; nothing when the transcript moved since (or ``count`` is out of
        range). Hashes only the bytes after the last position this process hashed."""
        if count < MIN_LAZY or not _HEX.match(prefix_hash):
            return
        with self._locked(session_id):  # type: ignore[attr-defined]
            path: Path = self.transcript_path(session_id)  # type: ignore[attr-defined]
            st = path.stat()
            if revision_of(st) != revision:
                return
            memo = self._memo(session_id)
            if memo is None or memo.inode != st.st_ino or not memo.lines <= count:
                memo = _Memo(st.st_ino, 0, 0, hashlib.sha256())
            with path.open("rb") as f:
                f.seek(memo.end)
                rest = f.read()
            ends = line_ends(rest, count=count - memo.lines)
            if len(ends) < count - memo.lines:
                return  # the transcript holds fewer lines than ``count``
            at = ends[-1] if ends else 0
            sha = memo.sha.copy()
            sha.update(rest[:at])
            end = memo.end + at
            record = Record(count, end, sha.digest()[:16], prefix_hash)
            append_plain(self._prefix_path(session_id), encode_record(record))
            self._memo(session_id, _Memo(st.st_ino, count, end, sha))


def _verified(data: bytes, records: list[Record]) -> tuple[Record, Any] | None:
    """The furthest record whose digest matches ``data`` and the SHA-256 state at its end
    (one pass over the bytes up to it)."""
    best: tuple[Record, Any] | None = None
    sha, at = hashlib.sha256(), 0
    view = memoryview(data)
    for record in sorted({r.end: r for r in records if r.end <= len(data)}.values(),
                         key=lambda r: r.end):
        sha.update(view[at:record.end])
        at = record.end
        if sha.digest()[:16] == record.digest:
            best = (record, sha.copy())
    return best


__all__ = ["PrefixFiles", "PrefixMemos", "Record", "decode_records", "encode_record"]
