"""Durable file operations of the ``fs`` store, and its parsed-transcript cache.

Every write is whole or absent across a crash: appends are one ``write`` + ``fsync``; new
files are written complete under a temporary name and then linked into place; a torn tail is
saved to ``.corrupt`` before the transcript is truncated, so a crash in between leaves the
fragment in both places, never in neither.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path

import attrs

from ctxfold.atomic import FILE_MODE, fsync_dir

if sys.platform != "win32":
    import fcntl
else:  # pragma: no cover - exercised on Windows only
    fcntl = None
from ctxfold.kernel.errors import SessionError, StoreError
from ctxfold.kernel.types import ForkPoint, Message
from ctxfold.session_id import validate_session_id

#: A file's identity for the cache: (inode, size, mtime_ns).
StatKey = tuple[int, int, int]
CACHE_SESSIONS = 16


def stat_key(st: os.stat_result) -> StatKey:
    """The cache key of a ``stat`` result."""
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` (one call in practice; the loop guards short writes)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def append_plain(path: Path, payload: bytes) -> None:
    """Append ``payload`` in one ``write`` without fsync (a cache file)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    try:
        write_all(fd, payload)
    finally:
        os.close(fd)


def append_durably(path: Path, payload: bytes) -> os.stat_result:
    """Append ``payload`` to ``path`` in one write and fsync; the file's new ``stat``."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        write_all(fd, payload)
        os.fsync(fd)
        return os.fstat(fd)
    finally:
        os.close(fd)


def create_empty(path: Path) -> None:
    """Create an empty 0600 file; ``FileExistsError`` when it exists."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)


def publish_new(target: Path, data: bytes) -> None:
    """Create ``target`` holding ``data`` whole or not at all: a complete temp file linked
    into place (``link``, unlike ``rename``, refuses to replace a file created meanwhile:
    ``FileExistsError``)."""
    tmp = target.with_name(f".{target.name}.new{os.getpid()}x{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(target.parent)


def recover_torn(path: Path, good_end: int, torn: bytes) -> str:
    """Move an unfinished last line of ``path`` to ``<path>.corrupt`` (saved durably before
    the truncation); the warning text to show."""
    corrupt = path.with_name(path.name + ".corrupt")
    fd = os.open(corrupt, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    try:
        write_all(fd, torn if torn.endswith(b"\n") else torn + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    with open(path, "r+b") as handle:
        handle.truncate(good_end)
        handle.flush()
        os.fsync(handle.fileno())
    return (
        f"transcript {path}: unfinished last line ({len(torn)} bytes, probably a crash "
        f"during an append) moved to {corrupt}; the transcript now ends at the last "
        "complete message. Inspect the .corrupt file if that message matters."
    )


def move_aside(path: Path) -> Path | None:
    """Rename ``path`` to ``<path>.invalid-<UTC timestamp>`` (kept for audit); the new path,
    or ``None`` when there was nothing to move."""
    if not os.path.lexists(path):
        return None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    target = path.with_name(f"{path.name}.invalid-{stamp}")
    n = 0
    while os.path.lexists(target):
        n += 1
        target = path.with_name(f"{path.name}.invalid-{stamp}-{n}")
    os.replace(path, target)
    fsync_dir(path.parent)
    return target


@contextmanager
def session_lock(path: Path, what: str, timeout: float) -> Iterator[None]:
    """Hold the inter-process lock file ``path``; :class:`StoreError` naming ``what`` when
    another process holds it longer than ``timeout`` seconds. On POSIX an exclusive
    ``flock`` on a descriptor of its own (the lock ``filelock`` takes there too, so both
    exclude each other; per open file, so threads exclude each other as well), a tenth of
    what building a ``filelock`` object costs on every append; elsewhere ``filelock``."""
    if fcntl is None:
        with _filelock(path, what, timeout):
            yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise _held(path, what, timeout) from None
                time.sleep(_LOCK_POLL)
        yield
    finally:
        os.close(fd)  # releases the lock


#: How often a waiting process tries a held session lock again (seconds).
_LOCK_POLL = 0.002


def _held(path: Path, what: str, timeout: float) -> StoreError:
    return StoreError(f"{what}: lock {path} is held by another process for more than "
                      f"{timeout:.0f} s; retry when it finishes")


@contextmanager
def _filelock(path: Path, what: str, timeout: float) -> Iterator[None]:
    import filelock  # only mutating operations pay for the import

    lock = filelock.FileLock(path, timeout=timeout, mode=FILE_MODE)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise _held(path, what, timeout) from None
    try:
        yield
    finally:
        lock.release()


def projection_within(sidecar: bytes | None, count: int) -> bool:
    """Whether a sidecar's projection lies inside the first ``count`` messages (no sidecar,
    or no projection, counts as inside; an unreadable one does not)."""
    if sidecar is None:
        return True
    try:
        projection = json.loads(sidecar).get("projection")
        return projection is None or int(projection.get("covered_count", 0)) <= count
    except (ValueError, TypeError, AttributeError):
        return False  # unreadable: it would be discarded on the next load anyway


def encode_fork_point(point: ForkPoint) -> bytes:
    """A fork record as the ``fs`` store writes it (``<id>.parent.json``)."""
    return (json.dumps(attrs.asdict(point), ensure_ascii=False) + "\n").encode()


def decode_fork_point(data: bytes | None) -> ForkPoint | None:
    """A fork record (file or row); ``None`` when there is none or it is unreadable (it is
    information for people, never something the engine acts on)."""
    if not data:
        return None
    try:
        raw = json.loads(data)
        point = ForkPoint(parent=str(raw["parent"]), at=int(raw["at"]),
                          reason=str(raw.get("reason", "fork")),
                          created_at=str(raw.get("created_at", "")))
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None
    return point


class TranscriptCache:
    """Parsed transcripts of the most recently used sessions, keyed by file identity, so
    re-loading an unchanged session costs one ``stat``."""

    def __init__(self, size: int = CACHE_SESSIONS) -> None:
        self._size = size
        self._data: OrderedDict[str, tuple[StatKey, tuple[Message, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session_id: str, key: StatKey) -> tuple[Message, ...] | None:
        """The cached messages when the file still has identity ``key``."""
        with self._lock:
            entry = self._data.get(session_id)
            if entry is None or entry[0] != key:
                return None
            self._data.move_to_end(session_id)
            return entry[1]

    def put(self, session_id: str, key: StatKey, messages: tuple[Message, ...]) -> None:
        with self._lock:
            self._data[session_id] = (key, messages)
            self._data.move_to_end(session_id)
            while len(self._data) > self._size:
                self._data.popitem(last=False)

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._data.pop(session_id, None)


def revision_of(st: os.stat_result) -> str:
    """``inode:size:mtime``: an append grows the file, a rewind replaces it, and a session
    deleted and created again (which may reuse the inode) has a new modification time."""
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


#: The one-segment suffixes of a session's side files. Every name the store gives a file of
#: session ``<id>`` is ``<id>.`` + one of these families, or a temp file ``.<id>.<kind>.<r>.tmp``;
#: none of the variable parts (the token-count key, the timestamp, the random part of a temp
#: name) holds a dot. So the last dot-separated parts of a name say which family it is, and
#: what is left before them is the id: no file of another session — however its id is spelt,
#: ``a.tokens-x`` included — can have a name of session ``a``'s.
_SIDE_FILES = (r"context\.json|jsonl\.corrupt|prefix|parent\.json|tokens-[A-Za-z0-9_-]+|"
               r"context\.json\.invalid-\d{8}T\d{12}Z(?:-\d+)?")
_TEMP_KINDS = r"jsonl|context\.json|parent\.json"


def side_files_pattern(session_id: str) -> re.Pattern[str]:
    """The names of a session's files besides its transcript and lock: sidecar, discarded
    sidecars, torn tails, token-count and vouched-prefix records, its fork record, temp files
    of writes in flight — matched exactly (``fullmatch``), never a neighbour's."""
    sid = re.escape(validate_session_id(session_id))
    return re.compile(rf"{sid}\.(?:{_SIDE_FILES})|\.{sid}\.(?:{_TEMP_KINDS})\.[^.]+\.tmp")


def temp_files_pattern(session_id: str) -> re.Pattern[str]:
    """The temp files of the session's writes in flight (``.<id>.jsonl.<r>.tmp``, …)."""
    sid = re.escape(validate_session_id(session_id))
    return re.compile(rf"\.{sid}\.(?:{_TEMP_KINDS})\.[^.]+\.tmp")


def sweep_session_temps(root: Path, session_id: str, older_than: float) -> None:
    """Remove the temp files killed writes of this session left, once older than
    ``older_than`` seconds (only this session's: a neighbour's are never touched)."""
    pattern = temp_files_pattern(session_id)
    cutoff = time.time() - older_than
    with suppress(OSError):
        for name in os.listdir(root):
            if name.startswith(".") and pattern.fullmatch(name):
                with suppress(OSError):  # gone meanwhile
                    path = root / name
                    if path.is_file() and path.lstat().st_mtime < cutoff:
                        path.unlink()


def session_ids(root: Path) -> list[str]:
    """Ids of the sessions whose transcript ``<id>.jsonl`` is in ``root``, sorted (names that
    are no valid session id are left out)."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    ids = []
    for name in names:
        if name.endswith(".jsonl"):
            with suppress(SessionError):
                ids.append(validate_session_id(name[: -len(".jsonl")]))
    return sorted(ids)
