"""``ctxfold plugins [--json]``: list every registered strategy with its kind, name and source,
and why one cannot be built here (an optional extra that is not installed)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plugins",
        help="list registered strategies (kind, name, source)",
        description="List every strategy registered by built-in and third-party plugins.",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of objects")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctxfold.cli.common import load_registry

    registry = load_registry(args, validate=False)
    rows: list[dict[str, Any]] = [
        {"kind": s.kind, "name": s.name, "source": s.source, "description": s.description,
         "unavailable": s.missing() or None}
        for s in registry.specs()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width_kind = max([len("KIND"), *(len(r["kind"]) for r in rows)])
    width_name = max([len("NAME"), *(len(r["name"]) for r in rows)])
    print(f"{'KIND':<{width_kind}}  {'NAME':<{width_name}}  SOURCE")
    for r in rows:
        note = f"  [unavailable: {r['unavailable']}]" if r["unavailable"] else ""
        print(f"{r['kind']:<{width_kind}}  {r['name']:<{width_name}}  {r['source']}{note}")
    return 0
