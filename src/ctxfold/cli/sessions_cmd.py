"""``ctxfold sessions list|show|fork|rewind|delete``: explicit user operations on sessions.

These are the only commands that change a transcript besides appending (SPEC §1 inv. 1):
``fork`` creates a new session from a prefix (with its checkpoint when that lies within the
prefix), ``rewind`` goes back to a prefix and keeps the history as it was as a new session
``<id>-rewound-<k>`` (nothing is deleted), ``delete`` removes every file of a session (and
says which). ``rewind`` and ``delete`` ask for confirmation on a terminal and refuse on a
non-terminal unless ``--yes`` is given; ``--dry-run`` says what they would do and changes
nothing. Every subcommand takes ``--root DIR`` (default: ``[store] path``) and ``--json``;
:func:`open_store` is shared with ``inspect`` and ``chat``.
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


def fork_json(store: Store, session_id: str) -> dict[str, Any] | None:
    """Where ``session_id`` was forked from, as JSON (``None``: created, or not recorded)."""
    from ctxfold.engine.lineage import fork_point

    point = fork_point(store, session_id)
    return None if point is None else attrs.asdict(point)


def _parent_text(parent: dict[str, Any] | None) -> str:
    if parent is None:
        return "-"
    text = f"{parent['parent']}@{parent['at']}"
    return text if parent["reason"] == "fork" else f"{text} ({parent['reason']})"


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
                "parent": fork_json(handle.store, session_id),
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
    print(f"{'ID':<{width}}  {'MESSAGES':>8}  {'LAST ACTIVITY':<20}  VERSION  FORKED FROM")
    for r in rows:
        print(f"{r['id']:<{width}}  {r['messages']:>8}  {r['last_activity']:<20}  "
              f"{r['projection_version']:>7}  {_parent_text(r['parent'])}")
    return status


def message_json(message: Message, *, raw: bool) -> dict[str, Any]:
    """A message as JSON; ``raw_content`` only with ``raw`` (it is local-only text)."""
    from ctxfold.kernel.codec import message_to_dict

    data = message_to_dict(message)
    if not raw:
        data.pop("raw_content", None)
    return data


#: ``sessions show`` prints at most this much of each message unless ``--full``.
PREVIEW_LINES = 12
PREVIEW_CHARS = 1200


def preview(text: str, *, full: bool) -> str:
    """``text`` as ``sessions show`` prints it: whole with ``full``, else its first
    :data:`PREVIEW_LINES` lines and :data:`PREVIEW_CHARS` characters, then what was left out
    (long lines are cut too, so a one-line tool output cannot flood the terminal)."""
    if full or (len(text) <= PREVIEW_CHARS and text.count("\n") < PREVIEW_LINES):
        return text
    shown = "\n".join(text.split("\n")[:PREVIEW_LINES])[:PREVIEW_CHARS]
    hidden = text[len(shown):]
    return (f"{shown}\n  … {len(hidden):,} more characters, {hidden.count(chr(10)):,} more "
            "lines (--full prints every message whole)")


def _render(index: int, message: Message, raw: bool, full: bool) -> str:
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
        lines.append(preview(text, full=full))
    lines.extend(f"  -> {c.name}({preview(c.arguments, full=full)}) id={c.id}"
                 for c in message.tool_calls)
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
        print(_render(i, message, args.raw, args.full or args.raw))
    return 0


def run_fork(args: argparse.Namespace) -> int:
    from ctxfold.session_id import validate_session_id

    handle = open_store(args)
    session_id = require_session(handle, args.session)
    target = validate_session_id(args.new_id)
    handle.store.fork(session_id, target, args.at)
    count = len(handle.store.load(target))
    checkpoint = projection_version(handle.store, target)
    if args.json:
        print(json.dumps({"session": session_id, "fork": target, "messages": count,
                          "projection_version": checkpoint,
                          "parent": fork_json(handle.store, target)}, indent=2))
        return 0
    carried = f", from checkpoint version {checkpoint}" if checkpoint else ""
    print(f"forked {session_id} -> {target} ({count} messages{carried})")
    return 0


def run_rewind(args: argparse.Namespace) -> int:
    from ctxfold.engine.lineage import rewind, rewound_id
    from ctxfold.kernel.errors import SessionError

    handle = open_store(args)
    session_id = require_session(handle, args.session)
    total = len(handle.store.load(session_id, repair=False))
    if not 0 <= args.n <= total:
        raise SessionError(f"session {session_id!r} has {total} messages; N={args.n} must be "
                           f"from 0 to {total}")
    report = {"session": session_id, "messages": total, "kept": args.n,
              "dropped": total - args.n, "history": "", "dry_run": bool(args.dry_run)}
    if args.n < total:
        report["history"] = rewound_id(handle.store, session_id)
    if args.dry_run or args.n == total:
        _rewind_report(report, args.json, done=False)
        return 0
    confirm(f"Rewind session {session_id!r} to its first {args.n} of {total} messages? The "
            f"history as it is stays readable as session {report['history']!r}.",
            yes=args.yes, action="rewind")
    report["history"] = rewind(handle.store, session_id, args.n)
    _rewind_report(report, args.json, done=True)
    return 0


def _rewind_report(report: dict[str, Any], as_json: bool, *, done: bool) -> None:
    if as_json:
        print(json.dumps(report, indent=2))
        return
    session, kept, dropped = report["session"], report["kept"], report["dropped"]
    if not dropped:
        print(f"{session} has {kept} messages: nothing to rewind")
        return
    verb = "rewound" if done else "would rewind"
    keep = "kept" if done else "would be kept"
    print(f"{verb} {session} to {kept} messages (dropped {dropped} from it); the history as "
          f"it was ({report['messages']} messages, checkpoint included) {keep} as session "
          f"{report['history']} (`ctxfold sessions show {report['history']}`)")


def run_delete(args: argparse.Namespace) -> int:
    handle = open_store(args)
    session_id = require_session(handle, args.session)
    files = getattr(handle.store, "session_files", None)
    removed = ([str(p) for p in files(session_id)] if callable(files)
               else [f"session {session_id!r} in {handle.where}: its transcript, sidecar and "
                     "caches"])
    report = {"session": session_id,
              "messages": len(handle.store.load(session_id, repair=False)),
              "removes": removed, "dry_run": bool(args.dry_run)}
    if not args.dry_run:
        confirm(f"Delete session {session_id!r} ({report['messages']} messages) and these "
                f"files, for good?\n  " + "\n  ".join(removed), yes=args.yes, action="delete")
        handle.store.delete(session_id)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    verb = "would delete" if args.dry_run else "deleted"
    print(f"{verb} {session_id} ({report['messages']} messages):")
    for item in removed:
        print(f"  {item}")
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

    p = add("list", "list sessions (id, messages, last activity, projection version, where "
                    "a fork came from)", run_list)
    p.add_argument("--json", action="store_true", help="print a JSON list of objects")

    p = add("show", "print the canonical messages of a session", run_show)
    p.add_argument("session", metavar="SESSION", help="session id")
    p.add_argument("--json", action="store_true", help="print a JSON list of messages")
    p.add_argument("--raw", action="store_true",
                   help="show the full local text of bounded tool results (never sent)")
    p.add_argument("--full", action="store_true",
                   help=f"print every message whole (default: the first {PREVIEW_LINES} "
                        f"lines, at most {PREVIEW_CHARS} characters, of each)")

    p = add("fork", "create NEW_ID from a prefix of SESSION (with its checkpoint when that "
                    "lies within the prefix)", run_fork)
    p.add_argument("session", metavar="SESSION", help="source session id")
    p.add_argument("new_id", metavar="NEW_ID", help="id of the new session")
    p.add_argument("--at", type=int, default=None, metavar="N",
                   help="copy only the first N messages (default: all)")
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = add("rewind", "go back to the first N messages of SESSION; the history as it was is "
                      "kept as session SESSION-rewound-K (nothing is deleted)", run_rewind)
    p.add_argument("session", metavar="SESSION", help="session id")
    p.add_argument("n", type=int, metavar="N", help="number of messages to keep")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--dry-run", action="store_true", help="say what would happen; change "
                   "nothing")
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = add("delete", "remove every file of SESSION (listed first)", run_delete)
    p.add_argument("session", metavar="SESSION", help="session id")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed; "
                   "remove nothing")
    p.add_argument("--json", action="store_true", help="print one JSON object")
