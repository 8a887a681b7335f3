"""Remove retired configuration keys from TOML files, byte for byte (design §8.2, §8.3).

``migrate_file`` deletes exactly the lines of the key/value pairs that a registered
``config_migration`` strategy retires (built in: ``legacy-multi-threshold``, the five
``[agent]`` keys of the multi-threshold design) and leaves every other byte alone: comments,
blank lines, CRLF line endings, a missing final newline, a UTF-8 BOM.

A pair is removed only when it really belongs to the retired table: under a ``[agent]`` header
(not ``[agent.sub]``, not ``[[agent]]``), or as a top-level dotted key
(``agent.soft_compact_ratio`` / ``"agent".soft_compact_ratio``) before any header. Text inside
multi-line strings, arrays or inline tables is never mistaken for a key: the TOML lexer of
:mod:`ctxfold.config.toml_lexer` walks values the way a TOML parser does. Before writing, the
result is parsed with :mod:`tomllib` and must equal the original minus exactly the removed keys;
otherwise nothing is written.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import tomllib
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from ctxfold.atomic import atomic_write
from ctxfold.config.toml_lexer import strip_keys
from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import ConfigMigration
from ctxfold.kernel.errors import ConfigError, ConfigSyntaxError
from ctxfold.kernel.kinds import CONFIG_MIGRATION
from ctxfold.kernel.registry import Registry

LOCK_TIMEOUT_SECONDS = 10.0


@attrs.frozen
class MigrationResult:
    """Outcome of :func:`migrate_file`.

    ``removed`` lists ``(line_no, "table.key")`` of every deleted pair (1-based line of the
    key). ``kept`` names retired keys that could not be removed line-wise (inside an inline
    table such as ``agent = { soft_compact_ratio = 1 }``); they still load as zero.
    """

    path: Path
    changed: bool
    diff: str
    removed: list[tuple[int, str]] = attrs.field(factory=list)
    kept: list[str] = attrs.field(factory=list)


def default_migrations(registry: Registry | None = None) -> list[ConfigMigration]:
    """The ``config_migration`` strategies of ``registry`` (default: built-ins only)."""
    if registry is None:
        # Built-ins only: the config that could disable plugins is what is being loaded.
        registry = Registry.from_config(load_entry_points=False)
    return [registry.create(CONFIG_MIGRATION, name, config=Config())
            for name in registry.in_call_order(CONFIG_MIGRATION)]


def retired_paths(migrations: Iterable[ConfigMigration]) -> set[tuple[str, ...]]:
    """Full key paths (``("agent", "soft_compact_ratio")``) retired by ``migrations``."""
    paths: set[tuple[str, ...]] = set()
    for migration in migrations:
        table, names = migration.keys
        prefix = tuple(table.split(".")) if table else ()
        paths.update((*prefix, name) for name in names)
    return paths


def _lock_path(path: Path) -> Path:
    """A lock file in the temp directory, keyed by the config's resolved path: nothing is
    left beside the user's config (it would show up in their repository)."""
    import hashlib
    import tempfile

    digest = hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:24]
    return Path(tempfile.gettempdir()) / f"ctxfold-config-{digest}.lock"


@contextmanager
def config_lock(path: Path, timeout: float = LOCK_TIMEOUT_SECONDS) -> Iterator[None]:
    """Hold the config-edit lock of ``path`` (a file in the temp directory keyed by it).

    Every ctxfold command that rewrites a config file takes this lock, so two concurrent
    edits cannot lose each other's changes.
    """
    import filelock

    lock = filelock.FileLock(str(_lock_path(path)), timeout=timeout)
    try:
        with lock:
            yield
    except filelock.Timeout:
        raise ConfigError(
            f"{path}: another process holds the config-edit lock {_lock_path(path)} "
            f"for more than {timeout:g} s; retry when it has finished"
        ) from None


def _parse(text: str, path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(text.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}; fix the syntax first") from None


def _delete(data: dict[str, Any], path: tuple[str, ...]) -> None:
    node: Any = data
    for part in path[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(path[-1], None)


def _drop_empty(data: Any) -> Any:
    # A table that only held retired dotted keys vanishes from the parse when they go.
    if isinstance(data, dict):
        return {k: _drop_empty(v) for k, v in data.items() if v != {}}
    return data


def _lines(text: str) -> list[str]:
    # Only "\n" ends a TOML line; str.splitlines would also split on \f, \x1c, U+2028 ...
    return [line for line in re.split(r"(?<=\n)", text) if line]


def unified_diff(old: str, new: str, name: str) -> str:
    """A unified diff of two texts, marking a missing final newline like ``diff -u``."""
    out = []
    for line in difflib.unified_diff(
        _lines(old), _lines(new), fromfile=name, tofile=f"{name} (migrated)"
    ):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _leftovers(data: dict[str, Any], targets: Collection[tuple[str, ...]]) -> list[str]:
    left = []
    for path in sorted(targets):
        node: Any = data
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            left.append(".".join(path))
    return left


def plan_migration(
    text: str, path: Path, targets: Collection[tuple[str, ...]]
) -> tuple[str, MigrationResult]:
    """Compute the migrated text and its :class:`MigrationResult` without touching disk."""
    original = _parse(text, path)
    try:
        new_text, pairs = strip_keys(text, targets)
    except ConfigSyntaxError as exc:
        raise ConfigError(
            f"{path}: cannot locate keys to migrate: {exc}; remove the retired keys by hand"
        ) from None
    removed = [(p.line, ".".join(p.path)) for p in pairs]
    expected = copy.deepcopy(original)
    for pair in pairs:
        _delete(expected, pair.path)
    if pairs:
        result = _parse(new_text, path)
        if _drop_empty(result) != _drop_empty(expected):
            raise ConfigError(
                f"{path}: removing {', '.join(k for _, k in removed)} would change other "
                "settings; the file was left unchanged; remove those lines by hand and "
                "report this as a ctxfold bug"
            )
    kept = _leftovers(expected, targets)
    diff = unified_diff(text, new_text, str(path)) if pairs else ""
    return new_text, MigrationResult(
        path=path, changed=bool(pairs), diff=diff, removed=removed, kept=kept
    )


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file does not exist; check the path") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file ({exc.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 (byte {exc.start}); TOML files must be UTF-8"
        ) from None


def migrate_file(
    path: str | Path, *, dry_run: bool = False, registry: Registry | None = None
) -> MigrationResult:
    """Remove retired keys from the TOML file ``path``.

    With ``dry_run`` nothing is written (the result carries the diff). Otherwise the file is
    rewritten atomically (:func:`ctxfold.atomic.atomic_write`), keeping its
    permissions, under :func:`config_lock`. A file without retired keys is not touched, so a
    second run is a no-op that leaves the mtime alone. Symlinks are followed.
    """

    target = Path(os.path.realpath(path))
    targets = retired_paths(default_migrations(registry))
    if dry_run:
        return plan_migration(_read_text(target), Path(path), targets)[1]
    _read_text(target)  # a missing/unreadable file fails before a lock file is created
    with config_lock(target):
        new_text, result = plan_migration(_read_text(target), Path(path), targets)
        if result.changed:
            atomic_write(target, new_text.encode("utf-8"))
    return result
