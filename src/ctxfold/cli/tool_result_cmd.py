"""``ctxfold tool-result SESSION CALL_ID``: print one ``session:tool_result`` page.

The output is exactly what the model receives from ``use_capability`` (design §3.2): one JSON
header line, a newline and the page, byte for byte, with no trailing newline added, so pages
printed one after another concatenate to the full tool result.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ctxfold.capabilities.tool_result import PAGE_MAX
from ctxfold.cli.common import number_in


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tool-result",
        help="print one page of a stored tool result (as the model would read it)",
        description=(
            "Print one page of the full text of a tool result of SESSION: a JSON header line "
            "{result_ref, offset, next_offset, total_bytes, sha256, complete}, a newline and "
            "the page. Continue with --offset NEXT_OFFSET until complete is true."
        ),
    )
    parser.add_argument("session", metavar="SESSION", help="session id")
    parser.add_argument("call_id", metavar="CALL_ID", help="tool_call_id of the tool result")
    parser.add_argument("--offset", type=number_in(0), default=0, metavar="N",
                        help="UTF-8 byte offset of the page (default 0)")
    parser.add_argument("--limit", type=number_in(1, PAGE_MAX), default=None, metavar="N",
                        help="page size in bytes (default 16384, max 24576)")
    parser.add_argument("--result-ref", default=None, metavar="REF",
                        help="result_ref from the truncation marker (tr-…)")
    parser.add_argument("--root", default=None, metavar="DIR",
                        help="session directory (default: [store] path from config)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import attrs

    from ctxfold.capabilities.tool_result import read_tool_result
    from ctxfold.cli.common import load_cli_config
    from ctxfold.kernel.errors import SessionError
    from ctxfold.kernel.kinds import STORE, StoreOptions
    from ctxfold.kernel.registry import Registry

    config = load_cli_config(args).config
    if args.root:
        # --root wins over [store] path; set both so any store honouring either agrees.
        config = attrs.evolve(config, store=attrs.evolve(config.store, path=str(args.root)))
    registry = Registry.from_config(config)
    store = registry.create(STORE, config.store.name, config=config,
                            options=StoreOptions(path=str(args.root) if args.root else None))
    where = args.root or config.store.path
    if not store.exists(args.session):
        raise SessionError(
            f"session {args.session!r} not found in {where}; check the id or pass --root DIR"
        )
    page = read_tool_result(
        store.load(args.session, repair=False),  # read-only: never writes
        tool_call_id=args.call_id,
        result_ref=args.result_ref,
        offset=args.offset,
        limit=args.limit,
    )
    _write(page)
    return 0


def _write(text: str) -> None:
    # Write UTF-8 bytes regardless of the locale so the page is exactly the model's bytes.
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        sys.stdout.write(text)
    else:
        buffer.write(text.encode())
        buffer.flush()
