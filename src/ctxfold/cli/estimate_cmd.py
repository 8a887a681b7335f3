"""``ctxfold estimate PATH... [--estimator NAME] [--per-request] [--json]``.

Token counts of session files in OpenAI chat format: a JSON list of message dicts, a JSON
object with a ``messages`` list (and optionally a ``tools`` list, which is counted), or
JSONL with one message per line. ``--per-request`` adds, for each assistant message, the
estimate of the request that produced it (every message before it).

Reading goes through :func:`read_session_file` and :func:`read_session_tools` only, so
more importer formats can be plugged in there later.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ctxfold.kernel.errors import StoreError
from ctxfold.kernel.types import Message, ToolSchema


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "estimate",
        help="estimate the tokens of session files (OpenAI chat format)",
        description="Estimate the tokens of session files: a JSON list of messages, a JSON "
        "object with 'messages' (and optional 'tools'), or JSONL (one message per line).",
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
    parser.set_defaults(func=run)


# -- reading -----------------------------------------------------------------------------------


def _load(path: Path) -> tuple[list[Any], list[Any]]:
    """Raw message dicts and raw tool dicts of one file, with positions in errors."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"{path}: cannot read session file: {exc}") from exc
    is_jsonl = path.suffix.lower() in (".jsonl", ".ndjson")
    if not is_jsonl:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":
                raise StoreError(
                    f"{path}: line {exc.lineno} column {exc.colno}: invalid JSON ({exc.msg}); "
                    "expected a JSON list of messages, an object with 'messages', or JSONL"
                ) from exc
            is_jsonl = True  # several JSON values: one message per line
        else:
            if isinstance(data, list):
                return data, []
            if isinstance(data, dict) and isinstance(data.get("messages"), list):
                tools = data.get("tools") or []
                if not isinstance(tools, list):
                    raise StoreError(f"{path}: 'tools' must be a list of tool schemas")
                return data["messages"], tools
            raise StoreError(
                f"{path}: expected a JSON list of messages or an object with a 'messages' "
                f"list, got {type(data).__name__}"
            )
    messages = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            messages.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise StoreError(
                f"{path}: line {lineno} column {exc.colno}: invalid JSON ({exc.msg}); "
                "JSONL needs one complete message object per line"
            ) from exc
    return messages, []


def read_session_file(path: str | Path) -> list[Message]:
    """The messages of one session file (OpenAI chat format)."""
    from ctxfold.kernel.convert import message_from_openai

    p = Path(path)
    raw, _tools = _load(p)
    return [message_from_openai(m, where=f"{p}: message {i}") for i, m in enumerate(raw)]


def read_session_tools(path: str | Path) -> list[ToolSchema]:
    """The tool schemas recorded in one session file (empty when it records none)."""
    from ctxfold.kernel.convert import tool_schema_from_openai

    p = Path(path)
    _raw, tools = _load(p)
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise StoreError(f"{p}: tools[{i}] must be an object, got {type(tool).__name__}")
        out.append(tool_schema_from_openai(tool))
    return out


# -- running -----------------------------------------------------------------------------------


def estimate_session(estimator: Any, messages: list[Message], tools: list[ToolSchema],
                     per_request: bool) -> tuple[int, list[dict[str, int]]]:
    """Total estimate and, if asked, ``{"index", "tokens"}`` per assistant message."""
    from ctxfold.kernel.types import RequestShape

    requests = []
    if per_request:
        for i, message in enumerate(messages):
            if message.role == "assistant" and not message.local_only:
                shape = RequestShape(messages=messages[:i], tools=tools)
                requests.append({"index": i, "tokens": estimator.estimate(shape)})
    return estimator.estimate(RequestShape(messages=messages, tools=tools)), requests


def run(args: argparse.Namespace) -> int:
    from ctxfold.cli.common import load_cli_config, load_registry
    from ctxfold.kernel.convert import InteropError
    from ctxfold.kernel.strategies import StrategyContext

    loaded = load_cli_config(args)
    registry = load_registry(args)
    name = args.estimator or loaded.config.estimator.name
    estimator = registry.create(
        "estimator", name, StrategyContext(config=loaded.config, registry=registry)
    )
    sessions: list[dict[str, Any]] = []
    for path in args.paths:
        try:
            messages = read_session_file(path)
            tools = read_session_tools(path)
        except InteropError as exc:
            raise StoreError(f"{exc}; fix the message or convert the file to OpenAI "
                             "chat format") from exc
        tokens, requests = estimate_session(estimator, messages, tools, args.per_request)
        sessions.append({"name": str(path), "tokens": tokens, "requests": requests})
    if args.json:
        print(json.dumps({"estimator": name, "sessions": sessions}, indent=2))
        return 0
    for session in sessions:
        print(f"{session['tokens']:>10}  {session['name']}")
        for request in session["requests"]:
            print(f"{request['tokens']:>10}    request before message {request['index']}")
    return 0
