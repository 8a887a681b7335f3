"""Durable writes (design §1.3): the sidecar and every other replaced file go temp file →
fsync → rename → directory fsync."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ctxfold import atomic


def test_write_order_is_fsync_rename_dir_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        calls.append(f"fsync-{kind}")
        real_fsync(fd)

    def replace(src, dst) -> None:
        calls.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    target = tmp_path / "s.context.json"
    atomic.atomic_write(target, b"{}\n")
    assert calls == ["fsync-file", "rename", "fsync-dir"]
    assert target.read_bytes() == b"{}\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_failed_rename_keeps_the_old_file_and_no_temp(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "s.context.json"
    target.write_bytes(b"old")

    def boom(src, dst) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic.atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["s.context.json"]


def test_existing_permissions_are_kept(tmp_path: Path) -> None:
    target = tmp_path / "ctxfold.toml"
    target.write_text("x")
    os.chmod(target, 0o640)
    atomic.atomic_write(target, b"y")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_every_created_directory_is_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic.ensure_dir(tmp_path / "a" / "b" / "c")
    finally:
        os.umask(old)
    for path in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path


def test_a_write_removes_temp_files_earlier_killed_writes_of_that_file_left(
        tmp_path: Path) -> None:
    target = tmp_path / "ctxfold.toml"
    old = tmp_path / ".ctxfold.toml.abc123.tmp"
    young = tmp_path / ".ctxfold.toml.def456.tmp"
    unrelated = tmp_path / ".other.toml.abc123.tmp"
    for path in (old, young, unrelated):
        path.write_bytes(b"partial")
    stamp = os.path.getmtime(old) - 3_600
    for path in (old, unrelated):
        os.utime(path, (stamp, stamp))
    atomic.atomic_write(target, b"x = 1\n")
    assert target.read_bytes() == b"x = 1\n"
    assert not old.exists()
    assert young.exists() and unrelated.exists()  # in flight / another file's
