"""The filesystem store ``fs``: one JSONL transcript and one sidecar per session (SPEC §4.1).

Files of session ``<id>`` under the store root (see ``docs/formats.md``):

* ``<id>.jsonl`` — the canonical transcript, one message per line, append-only;
* ``<id>.context.json`` — the sidecar (written atomically, SPEC §4.2);
* ``<id>.lock`` — the inter-process lock taken by every mutating operation;
* ``<id>.jsonl.corrupt`` — torn tails recovered from crashed appends (appended, never
  overwritten);
* ``<id>.context.json.invalid-<UTC timestamp>`` — discarded sidecars, kept for audit.

Files are created 0600 and the root 0700. Readers take no lock: an append is one
``write`` call under the lock, so a lock-free reader sees complete lines or an unfinished
last line, and an unfinished last line is only ever repaired after taking the lock and
reading again (it may be another process's append in flight).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path

from ctxfold.atomic import FILE_MODE, atomic_write, ensure_dir, fsync_dir
from ctxfold.kernel.contracts import StrategyContext, StrategySpec
from ctxfold.kernel.errors import SessionError, SidecarError, StoreError
from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import StoreOptions
from ctxfold.kernel.session_id import validate_session_id
from ctxfold.kernel.types import Message
from ctxfold.plugins.stores.fs_lines import encode_lines, line_ends, parse_transcript

log = logging.getLogger(__name__)

#: Seconds to wait for another process holding a session lock before giving up.
LOCK_TIMEOUT = 60.0
_CACHE_SESSIONS = 16
_CacheKey = tuple[int, int, int]


class StoreWarning(UserWarning):
    """A store repaired something on disk (torn transcript tail, discarded sidecar)."""


def _warn(message: str) -> None:
    # A warning, not also a log line: the CLI shows Python warnings on stderr already.
    warnings.warn(message, StoreWarning, stacklevel=3)


def _key(st: os.stat_result) -> _CacheKey:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # one call in practice; the loop only guards against short writes
        view = view[os.write(fd, view) :]


class FsStore:
    """Durable transcripts and sidecars in one directory (implements ``Store``).

    Parsed transcripts are cached per session, keyed by the file's (inode, size, mtime_ns),
    so re-loading an unchanged session costs one ``stat``.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._cache: OrderedDict[str, tuple[_CacheKey, tuple[Message, ...]]] = OrderedDict()
        self._cache_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FsStore({str(self.root)!r})"

    # -- paths, locking, cache -----------------------------------------------------------------

    def transcript_path(self, session_id: str) -> Path:
        """``<root>/<id>.jsonl`` (the id is validated)."""
        return self.root / f"{validate_session_id(session_id)}.jsonl"

    def sidecar_path(self, session_id: str) -> Path:
        """``<root>/<id>.context.json`` (the id is validated)."""
        return self.root / f"{validate_session_id(session_id)}.context.json"

    @contextmanager
    def _locked(self, session_id: str) -> Iterator[None]:
        import filelock  # only mutating operations pay for the import

        # Unknown sessions fail before a lock file is created, so none is left behind.
        self._stat(session_id)
        path = self.root / f"{session_id}.lock"
        lock = filelock.FileLock(path, timeout=LOCK_TIMEOUT, mode=FILE_MODE)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise StoreError(
                f"session {session_id!r}: lock {path} is held by another process for more "
                f"than {LOCK_TIMEOUT:.0f} s; retry when it finishes"
            ) from None
        try:
            yield
        finally:
            lock.release()

    def _unknown(self, session_id: str) -> SessionError:
        return SessionError(
            f"session {session_id!r} does not exist in store {self.root}; "
            "check the id and the [store] path, or create the session first"
        )

    def _stat(self, session_id: str) -> os.stat_result:
        try:
            return self.transcript_path(session_id).stat()
        except FileNotFoundError:
            raise self._unknown(session_id) from None
        except OSError as exc:
            raise StoreError(f"cannot stat transcript of session {session_id!r}: {exc}") from exc

    def _cached(self, session_id: str, key: _CacheKey) -> tuple[Message, ...] | None:
        with self._cache_lock:
            entry = self._cache.get(session_id)
            if entry is None or entry[0] != key:
                return None
            self._cache.move_to_end(session_id)
            return entry[1]

    def _remember(self, session_id: str, key: _CacheKey, messages: tuple[Message, ...]) -> None:
        with self._cache_lock:
            self._cache[session_id] = (key, messages)
            self._cache.move_to_end(session_id)
            while len(self._cache) > _CACHE_SESSIONS:
                self._cache.popitem(last=False)

    def _forget(self, session_id: str) -> None:
        with self._cache_lock:
            self._cache.pop(session_id, None)

    # -- transcript ----------------------------------------------------------------------------

    def _read(self, path: Path) -> bytes:
        try:
            return path.read_bytes()
        except OSError as exc:
            raise StoreError(f"cannot read transcript {path}: {exc}; check permissions") from exc

    def _load_locked(self, session_id: str) -> tuple[tuple[Message, ...], list[int], bytes]:
        """Parse under the session lock, repairing a torn tail; (messages, line ends, data)."""
        path = self.transcript_path(session_id)
        self._stat(session_id)
        data = self._read(path)
        parsed = parse_transcript(data, path)
        if parsed.torn:
            self._recover_torn(path, parsed.good_end, parsed.torn)
            data = data[: parsed.good_end]
        messages = tuple(parsed.messages)
        self._remember(session_id, _key(path.stat()), messages)
        return messages, line_ends(data), data

    def _recover_torn(self, path: Path, good_end: int, torn: bytes) -> None:
        corrupt = path.with_name(path.name + ".corrupt")
        # Save the fragment durably *before* truncating: a crash in between leaves it in both
        # places, never in neither.
        fd = os.open(corrupt, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
        try:
            _write_all(fd, torn if torn.endswith(b"\n") else torn + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        with open(path, "r+b") as handle:
            handle.truncate(good_end)
            handle.flush()
            os.fsync(handle.fileno())
        _warn(
            f"transcript {path}: unfinished last line ({len(torn)} bytes, probably a crash "
            f"during an append) moved to {corrupt}; the transcript now ends at the last "
            "complete message. Inspect the .corrupt file if that message matters."
        )

    def load(self, session_id: str) -> list[Message]:
        """The canonical transcript of ``session_id`` (a new list on every call).

        A torn last line is moved to ``<id>.jsonl.corrupt`` with a :class:`StoreWarning`;
        any other unreadable line raises :class:`StoreError` naming the file and line.
        """
        st = self._stat(session_id)
        cached = self._cached(session_id, _key(st))
        if cached is not None:
            return list(cached)
        path = self.transcript_path(session_id)
        parsed = parse_transcript(self._read(path), path)
        if not parsed.torn:
            messages = tuple(parsed.messages)
            # Key by the stat taken *before* reading: if the file grew meanwhile, the next
            # load sees a different key and parses again.
            self._remember(session_id, _key(st), messages)
            return list(messages)
        # The unfinished tail may be an append in flight: decide only under the lock.
        with self._locked(session_id):
            return list(self._load_locked(session_id)[0])

    def append(self, session_id: str, messages: Sequence[Message]) -> None:
        """Append ``messages`` durably: one ``write`` and one ``fsync`` for the batch."""
        payload = encode_lines(messages)
        with self._locked(session_id):
            path = self.transcript_path(session_id)
            st = self._stat(session_id)
            cached = self._cached(session_id, _key(st))
            if cached is None and st.st_size and not self._ends_with_newline(path):
                # Never write after a torn tail: the new line would merge into it.
                cached, _, _ = self._load_locked(session_id)
            if not payload:
                return
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            try:
                _write_all(fd, payload)
                os.fsync(fd)
                new_key = _key(os.fstat(fd))
            finally:
                os.close(fd)
            if cached is not None:
                self._remember(session_id, new_key, (*cached, *messages))

    @staticmethod
    def _ends_with_newline(path: Path) -> bool:
        with open(path, "rb") as handle:
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) == b"\n"

    def exists(self, session_id: str) -> bool:
        """Whether the transcript of ``session_id`` exists."""
        return self.transcript_path(session_id).is_file()

    def create(self, session_id: str) -> None:
        """Create an empty session; :class:`SessionError` if it already exists."""
        path = self.transcript_path(session_id)
        ensure_dir(self.root)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError:
            raise SessionError(
                f"session {session_id!r} already exists in store {self.root}; "
                "choose another id or delete the session first"
            ) from None
        try:
            os.fchmod(fd, FILE_MODE)
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.root)

    def list_sessions(self) -> list[str]:
        """Ids of every session in the store, sorted."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        ids = []
        for name in names:
            if name.endswith(".jsonl"):
                with suppress(SessionError):
                    ids.append(validate_session_id(name[: -len(".jsonl")]))
        return sorted(ids)

    def last_activity(self, session_id: str) -> float | None:
        """Modification time (epoch seconds) of the transcript; ``None`` if absent.

        The sidecar's time is deliberately not used: ``resume()`` writes telemetry there,
        and that must not make a cold provider cache look warm.
        """
        try:
            return self.transcript_path(session_id).stat().st_mtime
        except FileNotFoundError:
            return None

    def fork(self, source_id: str, target_id: str, upto: int | None = None) -> None:
        """Create ``target_id`` from the first ``upto`` messages of ``source_id``.

        The lines are copied byte for byte; no sidecar is copied (the new session starts
        with the plain transcript as its view).
        """
        target = self.transcript_path(target_id)
        with self._locked(source_id):
            messages, ends, data = self._load_locked(source_id)
            count = len(messages) if upto is None else self._check_upto(source_id, upto, ends)
            prefix = data[: ends[count - 1]] if count else b""
        if target.exists():
            raise SessionError(
                f"cannot fork {source_id!r}: session {target_id!r} already exists in store "
                f"{self.root}; choose another id or delete it first"
            )
        # Write a complete temp file, then link it into place: the target appears whole or
        # not at all, and link (unlike rename) refuses to replace a session created meanwhile.
        tmp = self.root / f".{target.name}.fork{os.getpid()}x{threading.get_ident()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            _write_all(fd, prefix)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, target)
        except FileExistsError:
            raise SessionError(
                f"cannot fork {source_id!r}: session {target_id!r} was created concurrently "
                f"in store {self.root}"
            ) from None
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(self.root)

    def _check_upto(self, session_id: str, upto: int, ends: list[int]) -> int:
        if isinstance(upto, bool) or not isinstance(upto, int) or not 0 <= upto <= len(ends):
            raise SessionError(
                f"session {session_id!r} has {len(ends)} messages; upto={upto!r} must be an "
                f"integer from 0 to {len(ends)}"
            )
        return upto

    def rewind(self, session_id: str, upto: int) -> None:
        """Keep only the first ``upto`` messages (atomic rewrite of the transcript).

        The sidecar is kept when its projection still lies inside the kept prefix
        (``projection.covered_count <= upto``, so no paid checkpoint is thrown away);
        otherwise it is discarded (moved aside) and the view falls back to the transcript.
        """
        with self._locked(session_id):
            messages, ends, data = self._load_locked(session_id)
            count = self._check_upto(session_id, upto, ends)
            if count == len(messages):
                return
            path = self.transcript_path(session_id)
            atomic_write(path, data[: ends[count - 1]] if count else b"", mode=FILE_MODE)
            self._remember(session_id, _key(path.stat()), messages[:count])
            if not self._sidecar_fits(session_id, count):
                # Expected consequence of the user's rewind, not a repair: log, don't warn.
                self._discard_locked(session_id, f"rewind to {count} messages", warn=False)

    def _sidecar_fits(self, session_id: str, count: int) -> bool:
        raw = self._read_sidecar_file(session_id)
        if raw is None:
            return True
        try:
            projection = json.loads(raw).get("projection")
            return projection is None or int(projection.get("covered_count", 0)) <= count
        except (ValueError, TypeError, AttributeError):
            return False  # unreadable: it would be discarded on the next load anyway

    def delete(self, session_id: str) -> None:
        """Remove every file of the session: sidecar (and discarded ones), side files,
        transcript, lock."""
        with self._locked(session_id):
            self._stat(session_id)
            pattern = re.compile(
                rf"{re.escape(session_id)}\.(context\.json|jsonl\.corrupt|"
                rf"context\.json\.invalid-\d{{8}}T\d{{12}}Z(-\d+)?)"
                rf"|\.{re.escape(session_id)}\.(jsonl|context\.json)\.[^.]+\.tmp"
            )
            # Sidecar first, transcript last: a crash midway leaves a session without a
            # sidecar (rebuilt on load), never a sidecar without its session.
            for name in sorted(os.listdir(self.root)):
                if pattern.fullmatch(name):
                    (self.root / name).unlink(missing_ok=True)
            self.transcript_path(session_id).unlink()
            self._forget(session_id)
            (self.root / f"{session_id}.lock").unlink(missing_ok=True)
        fsync_dir(self.root)

    # -- sidecar -------------------------------------------------------------------------------

    def _read_sidecar_file(self, session_id: str) -> bytes | None:
        path = self.sidecar_path(session_id)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SidecarError(
                f"cannot read sidecar {path} of session {session_id!r}: {exc}; it will be "
                "discarded and rebuilt from the transcript"
            ) from exc

    def read_sidecar(self, session_id: str) -> bytes | None:
        """The sidecar bytes, ``None`` if there is none; unreadable → :class:`SidecarError`."""
        self._stat(session_id)
        return self._read_sidecar_file(session_id)

    def write_sidecar(self, session_id: str, data: bytes) -> None:
        """Replace the sidecar atomically (temp file, fsync, rename, directory fsync)."""
        with self._locked(session_id):
            self._stat(session_id)  # never leave a sidecar behind a deleted session
            atomic_write(self.sidecar_path(session_id), data, mode=FILE_MODE)

    def discard_sidecar(self, session_id: str, reason: str) -> None:
        """Move the sidecar aside to ``<id>.context.json.invalid-<UTC timestamp>``."""
        with self._locked(session_id):
            self._discard_locked(session_id, reason)

    def _discard_locked(self, session_id: str, reason: str, *, warn: bool = True) -> None:
        path = self.sidecar_path(session_id)
        if not os.path.lexists(path):
            return
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        target = path.with_name(f"{path.name}.invalid-{stamp}")
        n = 0
        while os.path.lexists(target):
            n += 1
            target = path.with_name(f"{path.name}.invalid-{stamp}-{n}")
        os.replace(path, target)
        fsync_dir(self.root)
        message = (
            f"sidecar {path} of session {session_id!r} discarded ({reason}); kept as "
            f"{target.name} for inspection. The context view is rebuilt from the transcript."
        )
        if warn:
            _warn(message)
        else:
            log.info("%s", message)


def _create(context: StrategyContext[StoreOptions]) -> FsStore:
    # ``options["path"]`` overrides [store] path (e.g. a CLI flag). Resolved once, relative
    # to the working directory at creation, so a later chdir does not move the store.
    path = context.options.path or context.config.store.path
    return FsStore(Path(path).expanduser().absolute())


@hookimpl
def ctxfold_stores() -> list[StrategySpec]:
    """Register the filesystem store ``fs``."""
    return [
        StrategySpec(
            kind="store",
            name="fs",
            factory=_create,
            description="JSONL transcripts + JSON sidecars in [store] path (SPEC §4.1)",
        )
    ]
