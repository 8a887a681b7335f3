"""``ctxfold store migrate|copy``: a database store's schema, and moving sessions between
stores.

A store is named ``NAME[:ARG]``: ``fs`` (the configured ``[store] path``) or ``fs:PATH``;
``postgres`` (DSN from the variable named by ``[store] dsn_env``) or ``postgres:VAR`` (DSN
from environment variable ``VAR``; a DSN is never taken from the command line, where it
would land in shell history and process listings); any other store plugin by its name.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from ctxfold.cli.common import UsageError

if TYPE_CHECKING:
    from ctxfold.kernel.contracts import Store


def open_named_store(args: argparse.Namespace, spec: str, flag: str) -> Store:
    """The store ``spec`` names (``NAME[:ARG]``, see the module docstring)."""
    import attrs

    from ctxfold.cli.common import load_cli_config
    from ctxfold.kernel.kinds import STORE, StoreOptions
    from ctxfold.kernel.registry import Registry
    from ctxfold.secrets import ENV_NAME

    config = load_cli_config(args).config
    name, _, arg = spec.partition(":")
    if not name:
        raise UsageError(f"{flag}: name a store, e.g. fs:PATH or postgres")
    path = None
    if arg and name == "postgres":
        if not ENV_NAME.fullmatch(arg):
            raise UsageError(f"{flag}: after postgres: comes the NAME of the environment "
                             "variable holding the DSN (e.g. postgres:CTXFOLD_POSTGRES_DSN), "
                             "never the DSN itself")
        config = attrs.evolve(config, store=attrs.evolve(config.store, dsn_env=arg))
    elif arg:
        path = arg
        config = attrs.evolve(config, store=attrs.evolve(config.store, path=arg))
    registry = Registry.from_config(config)
    store: Store = registry.create(STORE, name, config=config, options=StoreOptions(path=path))
    return store


def run_migrate(args: argparse.Namespace) -> int:
    store = open_named_store(args, args.store or "", "--store") if args.store else None
    if store is None:
        from ctxfold.cli.store_access import open_store

        store = open_store(args).store
    migrate = getattr(store, "migrate", None)
    if not callable(migrate):
        print(f"{store!r} has no schema to migrate; nothing to do")
        return 0
    before, after = migrate()
    print(f"schema version {before} -> {after}" if before != after
          else f"schema version {after}: up to date")
    return 0


def run_copy(args: argparse.Namespace) -> int:
    from ctxfold.plugins.stores.copying import copy_session

    source = open_named_store(args, args.source, "--from")
    target = open_named_store(args, args.target, "--to")
    session_ids = args.session or source.list_sessions()
    copied = []
    for session_id in session_ids:
        done = copy_session(source, target, session_id)
        copied.append(done)
        if not args.json:
            print(f"copied {done.session_id}: {done.messages} messages in {done.batches} "
                  f"batches, sidecar {'yes' if done.sidecar else 'no'}, fingerprint "
                  f"{done.fingerprint[:16]}")
    if args.json:
        json.dump([{"session": c.session_id, "messages": c.messages, "batches": c.batches,
                    "sidecar": c.sidecar, "fingerprint": c.fingerprint} for c in copied],
                  sys.stdout, indent=2)
        print()
    else:
        print(f"{len(copied)} sessions copied and verified")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "store",
        help="migrate a database store's schema; copy sessions between stores",
        description="Stores are named NAME[:ARG]: fs, fs:PATH, postgres (DSN from the "
        "variable [store] dsn_env names), postgres:VAR (DSN from environment variable VAR), "
        "or a store plugin's name.",
    )
    sub = parser.add_subparsers(dest="store_command", metavar="ACTION", required=True)

    migrate = sub.add_parser("migrate", help="create or upgrade the configured store's schema",
                             description="Create or upgrade the schema of the configured "
                             "store (or --store); stores without a schema have nothing to do.")
    migrate.add_argument("--store", default=None, metavar="STORE",
                         help="the store to migrate (default: the configured one)")
    migrate.set_defaults(func=run_migrate)

    copy = sub.add_parser("copy", help="copy sessions from one store to another, verified",
                          description="Copy sessions (transcript batches and sidecar) to "
                          "another store and verify them by fingerprint. A session that "
                          "exists in the target is refused; a failed copy is removed.")
    copy.add_argument("--from", dest="source", required=True, metavar="STORE",
                      help="source store, e.g. fs:.ctxfold/sessions")
    copy.add_argument("--to", dest="target", required=True, metavar="STORE",
                      help="target store, e.g. postgres")
    copy.add_argument("--session", action="append", default=[], metavar="ID",
                      help="copy only this session (repeatable; default: all)")
    copy.add_argument("--json", action="store_true", help="print a JSON list of the copies")
    copy.set_defaults(func=run_copy)
