"""Durable file writes: temp file, fsync, rename, directory fsync (design §1.3)."""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
import time
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700
#: A temp file of :func:`atomic_write` older than this belongs to a writer that died (a live
#: write renames its temp file within milliseconds).
STALE_TEMP_SECONDS = 60.0


def ensure_dir(path: Path) -> None:
    """Create ``path`` and any missing parents, each with mode 0700 (``mkdir(parents=True)``
    would give the parents the umask's mode); existing directories are left alone."""
    path = Path(path)
    missing = []
    while not path.exists():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            directory.mkdir(mode=DIR_MODE)
            os.chmod(directory, DIR_MODE)  # mkdir's mode is masked by the umask


def fsync_dir(path: Path) -> None:
    """Best-effort fsync of a directory so a rename inside it is durable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def sweep_temps(directory: Path, name: str = "", *,
                older_than: float = STALE_TEMP_SECONDS) -> int:
    """Remove the temp files killed writers left in ``directory`` (``.<name>.*.tmp``; every
    ``.*.tmp`` when ``name`` is empty) older than ``older_than`` seconds; how many."""
    cutoff = time.time() - older_than
    removed = 0
    for temp in Path(directory).glob(f".{glob.escape(name)}*.tmp" if name else ".*.tmp"):
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to remove
            if temp.is_file() and temp.lstat().st_mtime < cutoff:
                temp.unlink()
                removed += 1
    return removed


def atomic_write(path: Path, data: bytes, *, mode: int | None = None,
                 sweep: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically.

    The new file gets ``mode`` if given, else the existing file's permissions, else 0600.
    On any failure the old file is left intact and the temp file is removed. With ``sweep``,
    stale temp files of earlier, killed writes of ``path`` are removed first.
    """
    path = Path(path)
    if sweep:
        sweep_temps(path.parent, f"{path.name}.")
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = FILE_MODE
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)
