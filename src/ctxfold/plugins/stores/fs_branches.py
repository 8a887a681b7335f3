"""Forks and rewinds of the ``fs`` store: new sessions made from a session's bytes.

A fork publishes the first ``upto`` lines of its source, byte for byte, as a new transcript
(whole or absent: a complete temp file linked into place), then the source's sidecar when its
projection lies within those lines, then ``<target>.parent.json``, the record of where it came
from (:class:`~ctxfold.ForkPoint`). A rewind with ``keep_as`` publishes the whole history the
same way under the session lock before it cuts the transcript back, so it deletes nothing.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ctxfold.atomic import FILE_MODE, atomic_write
from ctxfold.kernel.errors import SessionError
from ctxfold.kernel.types import ForkPoint, Message, utc_now
from ctxfold.plugins.stores.fs_files import (
    decode_fork_point,
    encode_fork_point,
    projection_within,
    publish_new,
    stat_key,
)
from ctxfold.plugins.stores.fs_lines import cut_prefix
from ctxfold.session_id import validate_session_id


class BranchFiles:
    """``fork``, ``rewind`` and ``fork_point`` of :class:`~ctxfold.plugins.stores.fs.FsStore`
    (which provides the paths, the session lock, parsing and the sidecar files)."""

    root: Path
    _cache: Any

    def transcript_path(self, session_id: str) -> Path:  # pragma: no cover - FsStore's
        raise NotImplementedError

    def sidecar_path(self, session_id: str) -> Path:  # pragma: no cover - FsStore's
        raise NotImplementedError

    def _locked(self, session_id: str) -> AbstractContextManager[None]:  # pragma: no cover
        raise NotImplementedError

    def _stat(self, session_id: str) -> Any:  # pragma: no cover - FsStore's
        raise NotImplementedError

    def _load_locked(self, session_id: str
                     ) -> tuple[tuple[Message, ...], list[int], bytes]:  # pragma: no cover
        raise NotImplementedError

    def _read_sidecar_file(self, session_id: str) -> bytes | None:  # pragma: no cover
        raise NotImplementedError

    def _discard_locked(self, session_id: str, reason: str, *,
                        warn: bool = True) -> None:  # pragma: no cover - SidecarFiles'
        raise NotImplementedError

    def fork(self, source_id: str, target_id: str, upto: int | None = None) -> None:
        """Create ``target_id`` from the first ``upto`` messages of ``source_id``.

        The lines are copied byte for byte. The source's sidecar comes along when its
        projection lies within the copied prefix (``covered_count <= upto``), so a fork of a
        long session starts from the same checkpoint (the engine validates it against the
        fork's transcript as it validates its own: the covered-prefix hash); otherwise the
        fork starts with the plain transcript as its view. ``<target>.parent.json`` records
        where the fork came from (:meth:`fork_point`).
        """
        target = self.transcript_path(target_id)
        with self._locked(source_id):
            messages, ends, data = self._load_locked(source_id)
            count = len(messages) if upto is None else self._check_upto(source_id, upto, ends)
            prefix = cut_prefix(data, ends, messages, count)
            sidecar = self._read_sidecar_file(source_id)
        self._create_copy(source_id, target_id, target, prefix,
                          sidecar if projection_within(sidecar, count) else None,
                          ForkPoint(parent=source_id, at=count, reason="fork",
                                    created_at=utc_now()))

    def _create_copy(self, source_id: str, target_id: str, target: Path, data: bytes,
                     sidecar: bytes | None, point: ForkPoint) -> None:
        """Publish the new session ``target_id``: its transcript first (whole or absent),
        then its sidecar and fork record (a crash in between leaves a session without them,
        never them without a session)."""
        if target.exists():
            raise SessionError(
                f"cannot fork {source_id!r}: session {target_id!r} already exists in store "
                f"{self.root}; choose another id or delete it first"
            )
        try:
            publish_new(target, data)
        except FileExistsError:
            raise SessionError(
                f"cannot fork {source_id!r}: session {target_id!r} was created concurrently "
                f"in store {self.root}"
            ) from None
        if sidecar is not None:
            atomic_write(self.sidecar_path(target_id), sidecar, mode=FILE_MODE, sweep=False)
        atomic_write(self._parent_path(target_id), encode_fork_point(point), mode=FILE_MODE,
                     sweep=False)

    def _parent_path(self, session_id: str) -> Path:
        return self.root / f"{validate_session_id(session_id)}.parent.json"

    def fork_point(self, session_id: str) -> ForkPoint | None:
        """Where the session was forked from (``<id>.parent.json``); ``None`` for a session
        that was created, or whose record is unreadable."""
        self._stat(session_id)
        try:
            return decode_fork_point(self._parent_path(session_id).read_bytes())
        except OSError:
            return None

    def _check_upto(self, session_id: str, upto: int, ends: list[int]) -> int:
        if isinstance(upto, bool) or not isinstance(upto, int) or not 0 <= upto <= len(ends):
            raise SessionError(
                f"session {session_id!r} has {len(ends)} messages; upto={upto!r} must be an "
                f"integer from 0 to {len(ends)}"
            )
        return upto

    def rewind(self, session_id: str, upto: int, *, keep_as: str | None = None) -> None:
        """Keep only the first ``upto`` messages (atomic rewrite of the transcript).

        With ``keep_as``, the whole history as it was (transcript bytes, sidecar) is first
        published as the new session ``keep_as``, recorded as a fork of this one at ``upto``
        with reason ``"rewind"`` — under the same lock, so no append slips in between and
        nothing is ever lost. Nothing is written when ``upto`` is the current length.

        The sidecar is kept when its projection still lies inside the kept prefix
        (``projection.covered_count <= upto``, so no paid checkpoint is thrown away);
        otherwise it is discarded (moved aside) and the view falls back to the transcript.
        """
        if keep_as is not None:
            keep_path = self.transcript_path(keep_as)
        with self._locked(session_id):
            messages, ends, data = self._load_locked(session_id)
            count = self._check_upto(session_id, upto, ends)
            if count == len(messages):
                return
            sidecar = self._read_sidecar_file(session_id)
            if keep_as is not None:
                self._create_copy(session_id, keep_as, keep_path, data, sidecar,
                                  ForkPoint(parent=session_id, at=count, reason="rewind",
                                            created_at=utc_now()))
            path = self.transcript_path(session_id)
            atomic_write(path, cut_prefix(data, ends, messages, count), mode=FILE_MODE,
                         sweep=False)
            self._cache.put(session_id, stat_key(path.stat()), messages[:count])
            if not projection_within(sidecar, count):
                # Expected consequence of the user's rewind, not a repair: log, don't warn.
                self._discard_locked(session_id, f"rewind to {count} messages", warn=False)


__all__ = ["BranchFiles"]
