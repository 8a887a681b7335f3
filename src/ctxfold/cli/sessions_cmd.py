"""``ctxfold sessions list|show|fork|rewind|delete``: explicit user operations on sessions.

These are the only commands that change a transcript besides appending (design §1.1):
``fork`` creates a new session from a prefix (with its checkpoint when that lies within the
prefix), ``rewind`` goes back to a prefix and keeps the history as it was as a new session
``<id>-rewound-<k>`` (nothing is deleted), ``delete`` removes every file of a session (and
says which). ``rewind`` and ``delete`` ask for confirmation on a terminal and refuse on a
non-terminal unless ``--yes`` is given; ``--dry-run`` says what they would do and changes
nothing. Every subcommand takes ``--root DIR`` (default: ``[store] path``) and ``--json``;
the fork, rewind and delete runners are :mod:`ctxfold.cli.sessions_edit`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ctxfold.cli.store_access import (
    add_root_flag,
    fork_json,
    iso_time,
    open_store,
    projection_version,
    require_session,
)
from ctxfold.kernel.errors import CtxfoldError

if TYPE_CHECKING:
    from ctxfold.kernel.types import Message


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


def register(subparsers: Any) -> None:
    from ctxfold.cli.sessions_edit import run_delete, run_fork, run_rewind

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
