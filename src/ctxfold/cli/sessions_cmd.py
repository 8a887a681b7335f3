"""``ctxfold sessions list|show|fork|rewind|delete``: explicit user operations on sessions.

These are the only commands that change a transcript besides appending (SPEC §1 inv. 1):
``fork`` creates a new session from a prefix, ``rewind`` truncates, ``delete`` removes every
file of a session. ``rewind`` and ``delete`` ask for confirmation on a terminal and refuse
on a non-terminal unless ``--yes`` is given. Every subcommand takes ``--root DIR`` (default:
``[store] path``); :func:`open_store` is shared with ``inspect`` and ``chat``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import attrs

from ctxfold.kernel.errors import CtxfoldError

if TYPE_CHECKING:
    from ctxfold.kernel.config import Config
    from ctxfold.kernel.contracts import Store
    from ctxfold.kernel.registry import Registry
    from ctxfold.kernel.types import Message


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


# -- subcommands -------------------------------------------------------------------------------


def run_list(args: argparse.Namespace) -> int:
    handle = open_store(args)
    rows: list[dict[str, Any]] = []
    damaged = 0
    for session_id in handle.store.list_sessions():
        try:  # read-only: a torn tail is left alone; one damaged session hides no other
            rows.append({
                "id": session_id,
                "messages": len(handle.store.load(session_id, repair=False)),
                "last_activity": iso_time(handle.store.last_activity(session_id)),
                "projection_version": projection_version(handle.store, session_id),
            })
        except CtxfoldError as exc:
            damaged += 1
            print(f"ctxfold: error: session {session_id!r}: {exc}", file=sys.stderr)
    status = 1 if damaged else 0
    if args.json:
        print(json.dumps(rows, indent=2))
        return status
    if not rows:
        print(f"no sessions in {handle.where}")
        return status
    width = max(len("ID"), *(len(r["id"]) for r in rows))
    print(f"{'ID':<{width}}  {'MESSAGES':>8}  {'LAST ACTIVITY':<20}  VERSION")
    for r in rows:
        print(f"{r['id']:<{width}}  {r['messages']:>8}  {r['last_activity']:<20}  "
              f"{r['projection_version']}")
    return status


def message_json(message: Message, *, raw: bool) -> dict[str, Any]:
    """A message as JSON; ``raw_content`` only with ``raw`` (it is local-only text)."""
    from ctxfold.kernel.codec import message_to_dict

    data = message_to_dict(message)
    if not raw:
        data.pop("raw_content", None)
    return data


def _render(index: int, message: Message, raw: bool) -> str:
    text = message.raw_content if raw and message.raw_content is not None else message.content
    flags = [f for f, on in (("host", message.origin == "host"),
                             ("local-only", message.local_only),
                             ("partial", message.partial),
                             ("bounded", message.raw_content is not None and not raw)) if on]
    head = f"[{index}] {message.role}"
    if message.role == "tool":
        head += f" ({message.name or 'tool'} {message.tool_call_id or ''})".rstrip()
    if flags:
        head += " {" + ", ".join(flags) + "}"
    lines = [head]
    if text:
        lines.append(text)
    lines.extend(f"  -> {c.name}({c.arguments}) id={c.id}" for c in message.tool_calls)
    return "\n".join(lines)


def run_show(args: argparse.Namespace) -> int:
    handle = open_store(args)
    session_id = require_session(handle, args.session)
    messages = handle.store.load(session_id, repair=False)  # read-only: never writes
    if args.json:
        print(json.dumps([message_json(m, raw=args.raw) for m in messages], indent=2,
                         ensure_ascii=False))
        return 0
    for i, message in enumerate(messages):
        print(_render(i, message, args.raw))
    return 0


def run_fork(args: argparse.Namespace) -> int:
    from ctxfold.session_id import validate_session_id

    handle = open_store(args)
    session_id = require_session(handle, args.session)
    target = validate_session_id(args.new_id)
    handle.store.fork(session_id, target, args.at)
    count = len(handle.store.load(target))
    print(f"forked {session_id} -> {target} ({count} messages)")
    return 0


def run_rewind(args: argparse.Namespace) -> int:
    from ctxfold.kernel.errors import SessionError

    handle = open_store(args)
    session_id = require_session(handle, args.session)
    total = len(handle.store.load(session_id))
    if not 0 <= args.n <= total:
        raise SessionError(f"session {session_id!r} has {total} messages; N={args.n} must be "
                           f"from 0 to {total}")
    confirm(f"Rewind session {session_id!r} to its first {args.n} messages "
            f"(drops {total - args.n} of {total})?", yes=args.yes, action="rewind")
    handle.store.rewind(session_id, args.n)
    print(f"rewound {session_id} to {args.n} messages (dropped {total - args.n})")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    handle = open_store(args)
    session_id = require_session(handle, args.session)
    confirm(f"Delete session {session_id!r} and every file of it in {handle.where}?",
            yes=args.yes, action="delete")
    handle.store.delete(session_id)
    print(f"deleted {session_id}")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sessions",
        help="list, show, fork, rewind or delete sessions",
        description="Explicit operations on stored sessions (the transcript is otherwise "
        "append-only). rewind and delete ask on a terminal; elsewhere they need --yes.",
    )
    sub = parser.add_subparsers(dest="sessions_command", metavar="ACTION", required=True)

    def add(name: str, help: str, func: Callable[[argparse.Namespace], int]
            ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=help, description=help)
        add_root_flag(p)
        p.set_defaults(func=func)
        return p

    p = add("list", "list sessions (id, messages, last activity, projection version)", run_list)
    p.add_argument("--json", action="store_true", help="print a JSON list of objects")

    p = add("show", "print the canonical messages of a session", run_show)
    p.add_argument("session", metavar="SESSION", help="session id")
    p.add_argument("--json", action="store_true", help="print a JSON list of messages")
    p.add_argument("--raw", action="store_true",
                   help="show the full local text of bounded tool results (never sent)")

    p = add("fork", "create NEW_ID from a prefix of SESSION", run_fork)
    p.add_argument("session", metavar="SESSION", help="source session id")
    p.add_argument("new_id", metavar="NEW_ID", help="id of the new session")
    p.add_argument("--at", type=int, default=None, metavar="N",
                   help="copy only the first N messages (default: all)")

    p = add("rewind", "truncate SESSION to its first N messages", run_rewind)
    p.add_argument("session", metavar="SESSION", help="session id")
    p.add_argument("n", type=int, metavar="N", help="number of messages to keep")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    p = add("delete", "remove every file of SESSION", run_delete)
    p.add_argument("session", metavar="SESSION", help="session id")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
