"""The store a CLI command works on, and the helpers every session command shares
(``sessions``, ``inspect``, ``chat``, ``tool-result``, ``store``)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from ctxfold.kernel.config import Config
    from ctxfold.kernel.contracts import Store
    from ctxfold.kernel.registry import Registry


@attrs.frozen
class StoreHandle:
    """The store a CLI invocation works on, with the config and registry that built it.

    ``where`` is the human description of the store location used in messages.
    """

    store: Store
    config: Config
    registry: Registry
    where: str


def add_root_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--root DIR`` (the session directory; default ``[store] path``)."""
    parser.add_argument("--root", default=None, metavar="DIR",
                        help="session directory (default: [store] path from config)")


def open_store(args: argparse.Namespace) -> StoreHandle:
    """The configured store, with ``--root`` overriding ``[store] path``."""
    import attrs

    from ctxfold.cli.common import load_cli_config
    from ctxfold.kernel.kinds import STORE, StoreOptions
    from ctxfold.kernel.registry import Registry

    config = load_cli_config(args).config
    root = getattr(args, "root", None)
    if root:
        # Set both so any store honouring either the option or the config agrees.
        config = attrs.evolve(config, store=attrs.evolve(config.store, path=str(root)))
    registry = Registry.from_config(config)
    store = registry.create(STORE, config.store.name, config=config,
                            options=StoreOptions(path=str(root) if root else None))
    return StoreHandle(store=store, config=config, registry=registry,
                       where=str(root or config.store.path))


def require_session(handle: StoreHandle, session_id: str) -> str:
    """Validate ``session_id`` and check that it exists; :class:`SessionError` otherwise."""
    from ctxfold.kernel.errors import SessionError
    from ctxfold.session_id import validate_session_id

    validate_session_id(session_id)
    if not handle.store.exists(session_id):
        raise SessionError(
            f"session {session_id!r} not found in {handle.where}; list the sessions with "
            "`ctxfold sessions list` or pass --root DIR"
        )
    return session_id


def iso_time(epoch: float | None) -> str:
    """Epoch seconds as ISO-8601 UTC (``""`` for ``None``)."""
    if epoch is None:
        return ""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def projection_version(store: Store, session_id: str) -> int:
    """The saved projection version (0 without a sidecar or projection); read-only."""
    try:
        raw = store.read_sidecar(session_id)
        data = json.loads(raw) if raw else {}
        projection = data.get("projection") if isinstance(data, dict) else None
        return int(projection.get("projection_version", 0)) if projection else 0
    except Exception:  # an unreadable sidecar counts as none; `inspect` shows the details
        return 0


def confirm(question: str, *, yes: bool, action: str) -> None:
    """Ask ``question`` on a terminal unless ``yes``; refuse on a non-terminal without it."""
    from ctxfold.kernel.errors import SessionError

    if yes:
        return
    if not sys.stdin.isatty():
        raise SessionError(f"refusing to {action} without confirmation: stdin is not a "
                           "terminal; pass --yes to confirm")
    answer = input(f"{question} [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise SessionError(f"{action} not confirmed; nothing was changed")


def fork_json(store: Store, session_id: str) -> dict[str, Any] | None:
    """Where ``session_id`` was forked from, as JSON (``None``: created, or not recorded)."""
    from ctxfold.engine.lineage import fork_point

    point = fork_point(store, session_id)
    return None if point is None else attrs.asdict(point)
