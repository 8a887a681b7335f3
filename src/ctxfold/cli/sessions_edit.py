"""``ctxfold sessions fork|rewind|delete``: the explicit operations that change sessions.

``fork`` creates a new session from a prefix (with its checkpoint when that lies within the
prefix); ``rewind`` goes back to a prefix and keeps the history as it was as a new session
``<id>-rewound-<k>`` — nothing is deleted; ``delete`` lists every file it removes. ``rewind``
and ``delete`` ask on a terminal and need ``--yes`` elsewhere; ``--dry-run`` says what they
would do and changes nothing; ``--json`` prints one object.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ctxfold.cli.store_access import (
    confirm,
    fork_json,
    open_store,
    projection_version,
    require_session,
)


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
