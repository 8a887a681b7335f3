"""Importing agent transcripts from other systems (strategy kind ``importer``).

An importer is registered with ``StrategySpec(name=..., factory=...)``
from the ``ctxfold_importers`` hook. Its factory returns an
:class:`~ctxfold.kernel.contracts.Importer`: a ``name``, a cheap ``sniff(path)`` (file name,
first/last bytes, directory layout; never a full parse) and ``load(path)`` returning an
:class:`~ctxfold.kernel.sessions.ImportedSession` of canonical messages.

:func:`import_session` is the one entry point the CLI (``estimate``, ``replay``) and the
benchmarks use: it auto-detects the format (each importer's ``sniff``, in ``priority``
order, first match wins) or uses the ``fmt`` the caller names, loads, and checks that every
``tool`` message answers an earlier tool call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import Importer
from ctxfold.kernel.errors import CtxfoldError, ImporterError
from ctxfold.kernel.kinds import IMPORTER, ImporterOptions
from ctxfold.kernel.registry import Registry
from ctxfold.kernel.sessions import ImportedSession
from ctxfold.kernel.types import Message, ToolSchema, Usage

__all__ = [
    "DEFAULT_PRIORITY",
    "SESSION_SUFFIXES",
    "SessionBuilder",
    "check_pairing",
    "detect_format",
    "expand_paths",
    "import_session",
    "importer_error",
    "known_formats",
]

#: Sniff order of an importer that does not declare ``priority`` (lower sniffs first).
#: Built-ins use 10–90 for specific formats and 1000 for the generic ``openai`` catch-all,
#: so a third-party format is tried after the built-in specific ones but before ``openai``.
DEFAULT_PRIORITY = 500


def importer_error(source: Path | str, position: str, reason: str, hint: str = "") -> ImporterError:
    """An :class:`ImporterError` in the standard shape ``<file>: <position>: <reason>; <hint>``."""
    where = f"{source}: {position}" if position else str(source)
    todo = hint or "fix the file or re-export it from the agent, or pass the right format"
    return ImporterError(f"{where}: {reason}; {todo}")


def check_pairing(
    messages: Sequence[Message], positions: Sequence[str], source: Path | str
) -> None:
    """Raise unless every ``tool`` message answers a tool call of an earlier message.

    ``positions[i]`` says where ``messages[i]`` came from (for the error message).
    Unanswered calls are allowed (a session may end with one in flight).
    """
    requested: set[str] = set()
    for index, message in enumerate(messages):
        position = positions[index] if index < len(positions) else f"message {index}"
        if message.role == "assistant":
            requested.update(call.id for call in message.tool_calls)
        elif message.role == "tool":
            if not message.tool_call_id:
                raise importer_error(source, position, "tool result has no tool call id")
            if message.tool_call_id not in requested:
                raise importer_error(
                    source,
                    position,
                    f"tool result answers call id {message.tool_call_id!r}, "
                    "which no earlier assistant message requested",
                )


class SessionBuilder:
    """Accumulates messages, their positions and usage, then validates and freezes them.

    Importers call :meth:`add` per produced message and :meth:`build` once; ``build`` runs
    :func:`check_pairing` so every importer enforces the same integrity rule.
    """

    def __init__(self, source: Path, fmt: str) -> None:
        self.source = source
        self.format = fmt
        self.messages: list[Message] = []
        self.positions: list[str] = []
        self.usage: list[Usage | None] = []
        self.tools: list[ToolSchema] = []
        self.model = ""

    def add(self, message: Message, position: str, usage: Usage | None = None) -> None:
        """Append ``message`` read at ``position`` with its reported usage (if any)."""
        self.messages.append(message)
        self.positions.append(position)
        self.usage.append(usage)

    def error(self, position: str, reason: str, hint: str = "") -> ImporterError:
        """An :class:`ImporterError` about this builder's source file."""
        return importer_error(self.source, position, reason, hint)

    def build(self, name: str) -> ImportedSession:
        """Validate tool pairing and return the frozen session."""
        check_pairing(self.messages, self.positions, self.source)
        return ImportedSession(
            name=name,
            messages=tuple(self.messages),
            tools=tuple(self.tools),
            reported_usage=tuple(self.usage),
            format=self.format,
            source=self.source,
            model=self.model,
        )


# -- selection ---------------------------------------------------------------------------------


def _importers(
    registry: Registry, config: Config | None, options: ImporterOptions | None
) -> dict[str, Importer]:
    built = {
        name: registry.create(IMPORTER, name, config=config or Config(),
                              options=options or ImporterOptions())
        for name in registry.names(IMPORTER)
    }
    ordered = sorted(
        built.items(), key=lambda item: (getattr(item[1], "priority", DEFAULT_PRIORITY), item[0])
    )
    return dict(ordered)


def known_formats(registry: Registry) -> list[str]:
    """Registered importer names, sorted."""
    return registry.names(IMPORTER)


def _sniff(importer: Importer, path: Path) -> bool:
    try:
        return bool(importer.sniff(path))
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        # An unreadable or odd file is "not this format"; load() reports the real problem.
        return False


def _detect(path: Path, importers: Mapping[str, Importer]) -> str:
    for name, importer in importers.items():
        if _sniff(importer, path):
            return name
    raise ImporterError(
        f"{path}: unknown transcript format (no importer recognised it); "
        f"known formats: {', '.join(sorted(importers)) or '(none registered)'}; "
        "pass the format explicitly (fmt= / --format) or add an importer plugin"
    )


def detect_format(
    path: Path | str, registry: Registry, *, config: Config | None = None
) -> str:
    """The name of the first importer (by priority) whose ``sniff`` accepts ``path``."""
    path = Path(path)
    _require_exists(path)
    return _detect(path, _importers(registry, config, None))


def _require_exists(path: Path) -> None:
    if not path.exists():
        raise ImporterError(f"{path}: no such file or directory; check the path")


def import_session(
    path: Path | str,
    registry: Registry,
    fmt: str | None = None,
    *,
    config: Config | None = None,
    options: ImporterOptions | None = None,
) -> ImportedSession:
    """Import the transcript at ``path``.

    ``fmt`` names the importer; ``None`` auto-detects. ``options`` reach the importer
    factories (e.g. ``ImporterOptions(exit_message="drop")`` for ``mini-swe-agent-v2``). Raises
    :class:`ImporterError` for a missing file, an unknown format (listing the known ones) or
    malformed content (naming file, position and reason).
    """
    path = Path(path)
    _require_exists(path)
    importers = _importers(registry, config, options)
    if fmt is None:
        fmt = _detect(path, importers)
    elif fmt not in importers:
        raise ImporterError(
            f"{path}: unknown transcript format {fmt!r}; "
            f"known formats: {', '.join(sorted(importers)) or '(none registered)'}"
        )
    try:
        session = importers[fmt].load(path)
    except ImporterError:
        raise
    except CtxfoldError as exc:  # e.g. a MessageError from a malformed tool schema
        raise ImporterError(f"{path}: {exc}; fix the file or re-export it from the agent"
                            ) from None
    except RecursionError:
        raise ImporterError(f"{path}: nested too deeply to read (a JSON value thousands of "
                            "levels deep); this is not an agent transcript") from None
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        # An importer (built-in or third-party) that trips over a malformed file: a clear
        # error naming the file and the format, never a traceback.
        raise ImporterError(f"{path}: not a valid {fmt} transcript ({type(exc).__name__}: "
                            f"{str(exc)[:200]}); fix the file or re-export it from the agent"
                            ) from None
    if not isinstance(session, ImportedSession):
        raise ImporterError(
            f"{path}: importer {fmt!r} returned {type(session).__name__}, not an "
            "ImportedSession; fix the importer plugin"
        )
    # Third-party importers may not use SessionBuilder; the pairing rule holds for all.
    check_pairing(
        session.messages, [f"message {i}" for i in range(len(session.messages))], path
    )
    return session


#: Files a directory walk offers to the importers (anything else, e.g. README.md, is skipped).
SESSION_SUFFIXES = (".json", ".jsonl", ".traj", ".xml", ".ndjson")


def expand_paths(paths: Sequence[str | Path], registry: Registry, fmt: str | None = None
                 ) -> list[Path]:
    """Each path as given, except that a directory no importer reads as one session (an
    OpenHands conversation is one) is walked for the sessions inside it. A missing path
    raises :class:`ImporterError`."""
    importers = _importers(registry, None, None)
    out: list[Path] = []

    def walk(path: Path) -> None:
        if path.is_dir():
            try:
                _detect(path, importers)
            except ImporterError:
                for child in sorted(path.iterdir()):
                    if child.is_dir() or child.suffix.lower() in SESSION_SUFFIXES:
                        walk(child)
                return
        out.append(path)

    for raw in paths:
        path = Path(raw)
        _require_exists(path)
        if fmt is None and path.is_dir():
            walk(path)
        else:
            out.append(path)
    return out
