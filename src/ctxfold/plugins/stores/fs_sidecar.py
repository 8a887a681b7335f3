"""The side files of the ``fs`` store: the sidecar ``<id>.context.json`` (written atomically,
replaced under compare-and-swap, moved aside when invalid) and the token-count record."""

from __future__ import annotations

import logging
import warnings
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ctxfold.atomic import FILE_MODE, atomic_write
from ctxfold.kernel.errors import SidecarError
from ctxfold.plugins.stores.fs_files import append_plain, move_aside
from ctxfold.session_id import validate_count_key, validate_session_id

log = logging.getLogger("ctxfold.plugins.stores.fs")


class StoreWarning(UserWarning):
    """A store repaired something on disk (torn transcript tail, discarded sidecar)."""


def store_warning(message: str) -> None:
    """Report a repair. A warning, not also a log line: the CLI shows Python warnings on
    stderr already."""
    warnings.warn(message, StoreWarning, stacklevel=3)


class SidecarFiles:
    """Sidecar methods of :class:`~ctxfold.plugins.stores.fs.FsStore` (which provides the
    paths, the session lock and ``_stat``)."""

    def sidecar_path(self, session_id: str) -> Path:  # pragma: no cover - FsStore's
        raise NotImplementedError

    def _locked(self, session_id: str) -> AbstractContextManager[None]:  # pragma: no cover
        raise NotImplementedError

    def _stat(self, session_id: str) -> Any:  # pragma: no cover - FsStore's
        raise NotImplementedError

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
            atomic_write(self.sidecar_path(session_id), data, mode=FILE_MODE, sweep=False)

    def replace_sidecar(self, session_id: str, data: bytes, expected: bytes | None) -> bool:
        """Write ``data`` only if the sidecar is still exactly ``expected`` (``None``: there
        is none), checked and written under the session lock; ``False`` when another writer
        changed it (nothing written)."""
        with self._locked(session_id):
            self._stat(session_id)
            if self._read_sidecar_file(session_id) != expected:
                return False
            atomic_write(self.sidecar_path(session_id), data, mode=FILE_MODE, sweep=False)
            return True

    def discard_sidecar(self, session_id: str, reason: str) -> None:
        """Move the sidecar aside to ``<id>.context.json.invalid-<UTC timestamp>``."""
        with self._locked(session_id):
            self._discard_locked(session_id, reason)

    def _discard_locked(self, session_id: str, reason: str, *, warn: bool = True) -> None:
        path = self.sidecar_path(session_id)
        target = move_aside(path)
        if target is None:
            return
        message = (
            f"sidecar {path} of session {session_id!r} discarded ({reason}); kept as "
            f"{target.name} for inspection. The context view is rebuilt from the transcript."
        )
        if warn:
            store_warning(message)
        else:
            log.info("%s", message)


class CountFiles:
    """The token-count record ``<id>.tokens-<key>`` of :class:`~ctxfold.plugins.stores.fs.FsStore`
    (the optional ``ctxfold.kernel.contracts.CountStore`` extension; FsStore provides ``root``)."""

    root: Path

    def _counts_path(self, session_id: str, key: str) -> Path:
        return self.root / f"{validate_session_id(session_id)}.tokens-{validate_count_key(key)}"

    def read_counts(self, session_id: str, key: str) -> bytes:
        """The record's bytes (empty when there is none)."""
        try:
            return self._counts_path(session_id, key).read_bytes()
        except FileNotFoundError:
            return b""

    def append_counts(self, session_id: str, key: str, data: bytes) -> None:
        """Append to the record (one ``write``, no fsync: it is a cache)."""
        append_plain(self._counts_path(session_id, key), data)
