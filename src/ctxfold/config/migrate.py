"""Remove retired configuration keys from TOML files, byte for byte (SPEC §4.3, origin §4).

``migrate_file`` deletes exactly the lines of the key/value pairs that a registered
``config_migration`` strategy retires (built in: ``legacy-multi-threshold``, the five
``[agent]`` keys of the multi-threshold design) and leaves every other byte alone: comments,
blank lines, CRLF line endings, a missing final newline, a UTF-8 BOM.

A pair is removed only when it really belongs to the retired table: under a ``[agent]``
header (not ``[agent.sub]``, not ``[[agent]]``), or as a top-level dotted key
(``agent.soft_compact_ratio`` / ``"agent".soft_compact_ratio``) before any header. Text inside
multi-line strings, arrays or inline tables is never mistaken for a key: the small TOML
lexer below (the origin's "string-state scanner", made complete) walks values the way a TOML
parser does. Before writing, the result is parsed with :mod:`tomllib` and must equal the
original minus exactly the removed keys; otherwise nothing is written.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import tomllib
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from ctxfold.kernel.errors import ConfigError

if TYPE_CHECKING:
    from ctxfold.kernel.registry import Registry

LOCK_TIMEOUT_SECONDS = 10.0


@runtime_checkable
class ConfigMigration(Protocol):
    """What a ``config_migration`` strategy object provides (load and migrate use both)."""

    #: ``(table, key names)``: the retired keys, e.g. ``("agent", ("soft_compact_ratio", ...))``.
    keys: tuple[str, tuple[str, ...]]

    def normalize(self, raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Return ``raw`` with retired keys zeroed and the dotted names of those found."""
        ...


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


# -- a TOML lexer that knows where each top-level key/value pair starts and ends ------------


class TomlLexError(ValueError):
    """The text is not TOML this lexer understands (``line`` is 1-based)."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"{message} at line {line}")
        self.line = line


@attrs.frozen
class Pair:
    """One top-level ``key = value`` statement.

    ``path`` is the full key path (table header + dotted key); ``start``/``end`` are string
    offsets of its whole line(s), ``end`` including the line ending; ``line`` is 1-based.
    """

    path: tuple[str, ...]
    array_header: bool
    start: int
    end: int
    line: int


_BARE_KEY = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\",
            "e": "\x1b"}
_HEX_LEN = {"x": 2, "u": 4, "U": 8}


class _Lexer:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 1 if text.startswith("\ufeff") else 0

    def fail(self, message: str) -> TomlLexError:
        return TomlLexError(message, self.s.count("\n", 0, self.i) + 1)

    def peek(self, token: str) -> bool:
        return self.s.startswith(token, self.i)

    def expect(self, token: str) -> None:
        if not self.peek(token):
            raise self.fail(f"expected {token!r}")
        self.i += len(token)

    def spaces(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t":
            self.i += 1

    def blanks(self) -> None:
        # Whitespace, newlines and comments: what may separate array/inline-table items.
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t\r\n":
                self.i += 1
            elif c == "#":
                self.comment()
            else:
                return

    def comment(self) -> None:
        while self.i < len(self.s) and self.s[self.i] not in "\r\n":
            self.i += 1

    def end_of_line(self) -> None:
        self.spaces()
        if self.peek("#"):
            self.comment()
        if self.peek("\r\n"):
            self.i += 2
        elif self.peek("\n"):
            self.i += 1
        elif self.i < len(self.s):
            raise self.fail(f"unexpected {self.s[self.i]!r}")

    def pairs(self) -> list[Pair]:
        found: list[Pair] = []
        header: tuple[str, ...] = ()
        array = False
        while self.i < len(self.s):
            start = self.i  # always a line start here
            self.spaces()
            if self.i >= len(self.s) or self.s[self.i] in "\r\n#":
                self.end_of_line()
            elif self.peek("["):
                array = self.peek("[[")
                self.i += 2 if array else 1
                header = self.key()
                self.expect("]]" if array else "]")
                self.end_of_line()
            else:
                line = self.s.count("\n", 0, self.i) + 1
                key = self.key()
                self.expect("=")
                self.spaces()
                self.value()
                self.end_of_line()
                found.append(Pair((*header, *key), array, start, self.i, line))
        return found

    def key(self) -> tuple[str, ...]:
        parts = []
        while True:
            self.spaces()
            if self.peek('"'):
                parts.append(self.basic_string())
            elif self.peek("'"):
                begin = self.i + 1
                self.literal_string()
                parts.append(self.s[begin : self.i - 1])
            else:
                begin = self.i
                while self.i < len(self.s) and self.s[self.i] in _BARE_KEY:
                    self.i += 1
                if begin == self.i:
                    raise self.fail("expected a key")
                parts.append(self.s[begin : self.i])
            self.spaces()
            if not self.peek("."):
                return tuple(parts)
            self.i += 1

    def value(self) -> None:
        if self.peek('"""') or self.peek("'''"):
            self.multiline_string(self.s[self.i])
        elif self.peek('"'):
            self.basic_string()
        elif self.peek("'"):
            self.literal_string()
        elif self.peek("[") or self.peek("{"):
            self.container("]" if self.peek("[") else "}")
        else:
            # Numbers, booleans and date-times (which may contain one space) never contain
            # these characters, so they end the scalar.
            begin = self.i
            while self.i < len(self.s) and self.s[self.i] not in ",]}#\r\n":
                self.i += 1
            if begin == self.i:
                raise self.fail("expected a value")

    def container(self, close: str) -> None:
        self.i += 1
        while True:
            self.blanks()
            if self.peek(close):
                self.i += 1
                return
            if self.i >= len(self.s):
                raise self.fail(f"unterminated {'array' if close == ']' else 'inline table'}")
            if close == "}":
                self.key()
                self.expect("=")
                self.blanks()
            self.value()
            self.blanks()
            if self.peek(","):
                self.i += 1

    def basic_string(self) -> str:
        self.i += 1
        out: list[str] = []
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == '"':
                self.i += 1
                return "".join(out)
            if c in "\r\n":
                break
            if c == "\\" and self.i + 1 < len(self.s):
                code = self.s[self.i + 1]
                size = _HEX_LEN.get(code, 0)
                if size:
                    digits = self.s[self.i + 2 : self.i + 2 + size]
                    try:
                        out.append(chr(int(digits, 16)))
                    except ValueError:
                        raise self.fail("invalid escape") from None
                else:
                    out.append(_ESCAPES.get(code, code))
                self.i += 2 + size
                continue
            out.append(c)
            self.i += 1
        raise self.fail("unterminated string")

    def literal_string(self) -> None:
        end = self.s.find("'", self.i + 1)
        newline = self.s.find("\n", self.i + 1)
        if end < 0 or 0 <= newline < end:
            raise self.fail("unterminated literal string")
        self.i = end + 1

    def multiline_string(self, quote: str) -> None:
        self.i += 3
        while self.i < len(self.s):
            if quote == '"' and self.s[self.i] == "\\":
                self.i += 2  # an escaped character can never close the string
                continue
            if self.peek(quote * 3):
                self.i += 3
                # Up to two quotes right before the delimiter belong to the content.
                for _ in range(2):
                    if self.peek(quote):
                        self.i += 1
                return
            self.i += 1
        raise self.fail("unterminated multi-line string")


def scan_pairs(text: str) -> list[Pair]:
    """Every top-level key/value pair of the TOML ``text``, in order."""
    return _Lexer(text).pairs()


def default_migrations(registry: Registry | None = None) -> list[ConfigMigration]:
    """The ``config_migration`` strategies of ``registry`` (default: built-ins only)."""
    from ctxfold.config.schema import Config
    from ctxfold.kernel.registry import Registry, make_plugin_manager
    from ctxfold.kernel.strategies import StrategyContext

    if registry is None:
        # Built-ins only: the config that could disable plugins is what is being loaded.
        registry = Registry(make_plugin_manager(load_entry_points=False))
    context = StrategyContext(config=Config(), registry=registry)
    return [spec.factory(context) for spec in registry.specs("config_migration")]


def retired_paths(migrations: Iterable[ConfigMigration]) -> set[tuple[str, ...]]:
    """Full key paths (``("agent", "soft_compact_ratio")``) retired by ``migrations``."""
    paths: set[tuple[str, ...]] = set()
    for migration in migrations:
        table, names = migration.keys
        prefix = tuple(table.split(".")) if table else ()
        paths.update((*prefix, name) for name in names)
    return paths


def strip_keys(
    text: str, targets: Collection[tuple[str, ...]]
) -> tuple[str, list[Pair]]:
    """Return ``text`` without the lines of the pairs whose full path is in ``targets``.

    Pairs under an array-of-tables header are never touched. Raises :class:`TomlLexError`
    when the text is not TOML the lexer understands.
    """
    removed = [
        p for p in scan_pairs(text) if not p.array_header and p.path in targets
    ]
    pieces: list[str] = []
    cursor = 0
    for pair in removed:
        pieces.append(text[cursor : pair.start])
        cursor = pair.end
    pieces.append(text[cursor:])
    return "".join(pieces), removed


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
    except TomlLexError as exc:
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
    rewritten atomically (:func:`ctxfold.kernel.atomic.atomic_write`), keeping its
    permissions, under :func:`config_lock`. A file without retired keys is not touched, so a
    second run is a no-op that leaves the mtime alone. Symlinks are followed.
    """
    from ctxfold.kernel.atomic import atomic_write

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
