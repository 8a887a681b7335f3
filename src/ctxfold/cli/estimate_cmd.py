"""``ctxfold estimate PATH... [--estimator NAME] [--per-request] [--json]``.

Token counts of session files in any importer format (OpenAI chat JSON/JSONL,
mini-swe-agent, SWE-agent, OpenHands, Claude Code; detected automatically, or ``--format``);
directories are walked like ``replay`` walks them, and one unreadable file is reported and
skipped (exit 1 at the end), never the end of the run. Recorded tool schemas are counted.
``--per-request`` adds, for each assistant message, the estimate of the request that produced
it (every message before it) beside the prompt tokens the provider reported, when the format
records them.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctxfold.kernel.errors import StoreError
from ctxfold.kernel.types import Message, ToolSchema, Usage


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "estimate",
        help="estimate the tokens of session files (any importer format)",
        description="Estimate the tokens of session files in any importer format "
        "(detected automatically; see docs/importers.md).",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="session file(s)")
    parser.add_argument(
        "--estimator", metavar="NAME", help="estimator name (default: [estimator] name)"
    )
    parser.add_argument(
        "--per-request",
        action="store_true",
        help="also estimate the request that produced each assistant message",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--format", metavar="FMT", help="session format (default: detected; see ctxfold plugins)"
    )
    parser.add_argument(
        "--tools", metavar="FILE",
        help="JSON list of OpenAI tool schemas the agent offered, for formats that do not "
        "record them (counted in every request, as the provider counts them)",
    )
    parser.set_defaults(func=run)


# -- reading -----------------------------------------------------------------------------------


def read_session(
    path: str | Path, registry: Any, fmt: str | None = None
) -> tuple[list[Message], list[ToolSchema]]:
    """Messages and recorded tool schemas of one session file, in any importer format
    (auto-detected unless ``fmt`` names one; see ``docs/importers.md``)."""
    from ctxfold.importing import import_session

    session = import_session(Path(path), registry, fmt)
    return list(session.messages), list(session.tools)


def read_tools_file(path: str | Path) -> list[ToolSchema]:
    """Tool schemas from a JSON list of OpenAI ``{"type": "function", "function": ...}``."""
    from ctxfold.interop.chat import tool_schema_from_openai

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StoreError(f"--tools {path}: cannot read a JSON list of tool schemas: {exc}") from exc
    if not isinstance(data, list) or not all(isinstance(t, dict) for t in data):
        raise StoreError(f"--tools {path}: expected a JSON list of tool schema objects")
    return [tool_schema_from_openai(t) for t in data]


# -- running -----------------------------------------------------------------------------------


def estimate_session(estimator: Any, messages: list[Message], tools: list[ToolSchema],
                     per_request: bool, reported: Sequence[Usage | None] = ()
                     ) -> tuple[int, list[dict[str, Any]]]:
    """Total estimate and, if asked, ``{"index", "tokens", "reported"}`` per assistant message
    (``reported``: the provider's prompt tokens for that request, ``None`` if not recorded)."""
    from ctxfold.kernel.types import RequestShape

    requests = []
    if per_request:
        for i, message in enumerate(messages):
            if message.role == "assistant" and not message.local_only:
                shape = RequestShape(messages=messages[:i], tools=tools)
                usage = reported[i] if i < len(reported) else None
                requests.append({"index": i, "tokens": estimator.estimate(shape),
                                 "reported": usage.prompt_tokens if usage else None})
    return estimator.estimate(RequestShape(messages=messages, tools=tools)), requests


def run(args: argparse.Namespace) -> int:
    import sys

    from ctxfold.cli.common import UsageError, load_cli_config, load_registry
    from ctxfold.importing import expand_paths, import_session
    from ctxfold.kernel.errors import CtxfoldError
    from ctxfold.kernel.kinds import ESTIMATOR, IMPORTER

    loaded = load_cli_config(args)
    registry = load_registry(args)
    name = args.estimator or loaded.config.estimator.name
    for flag, kind, value in (("--estimator", ESTIMATOR, args.estimator),
                              ("--format", IMPORTER, args.format)):
        if value and value not in registry.names(kind):  # a flag value: a usage error
            raise UsageError(f"{flag} {value!r}: not a registered {kind.name}; available: "
                             f"{', '.join(registry.names(kind))}")
    estimator = registry.create(ESTIMATOR, name, config=loaded.config)
    extra_tools = read_tools_file(args.tools) if args.tools else []
    results: list[dict[str, Any]] = []
    errors: list[dict[str, str]] = []
    for path in expand_paths(args.paths, registry, args.format):
        try:
            session = import_session(path, registry, args.format, config=loaded.config)
        except CtxfoldError as exc:  # one unreadable file must not hide the others
            errors.append({"path": str(path), "error": str(exc)})
            if not args.json:
                print(f"ctxfold: error: {exc}", file=sys.stderr)
            continue
        tokens, requests = estimate_session(
            estimator, list(session.messages), list(session.tools) or extra_tools,
            args.per_request, session.reported_usage)
        results.append({"name": str(path), "format": session.format, "tokens": tokens,
                         "requests": requests})
    if args.json:
        print(json.dumps({"estimator": name, "sessions": results, "errors": errors}, indent=2))
    else:
        for result in results:
            print(f"{result['tokens']:>10}  {result['name']}  ({result['format']})")
            for request in result["requests"]:
                print(f"{request['tokens']:>10}    request before message {request['index']}"
                      + _reported(request))
    return 1 if errors else 0


def _reported(request: dict[str, Any]) -> str:
    reported = request["reported"]
    if reported is None:
        return ""
    error = (request["tokens"] - reported) / reported * 100 if reported else 0.0
    return f"  (provider reported {reported}, estimate {error:+.1f}%)"
