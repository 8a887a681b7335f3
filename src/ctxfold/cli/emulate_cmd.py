"""``ctxfold emulate``: serve the loopback provider emulator until Ctrl-C."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import Any

from ctxfold.cli.common import number_in


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "emulate",
        help="serve a loopback provider emulator with prefix-cache accounting",
        description="Serve an emulated DeepSeek / MiMo / OpenAI Responses / Anthropic Messages "
                    "endpoint on 127.0.0.1 that reports prompt-cache usage like the real "
                    "provider. Prints the base URL, then serves until Ctrl-C.",
    )
    parser.add_argument("--port", type=int, default=0, help="TCP port (0 = ephemeral, default)")
    parser.add_argument("--profile", choices=("deepseek", "mimo", "responses", "anthropic"),
                        default="deepseek", metavar="NAME",
                        help="wire format and cache rules: deepseek (default), mimo, responses "
                             "or anthropic")
    parser.add_argument("--window", type=number_in(1), default=None,
                        help="context window in tokens (default: the profile's)")
    parser.add_argument("--script", metavar="FILE", default=None,
                        help="JSON list of replies ({text, tool_calls, reasoning, finish_reason})")
    parser.add_argument(
        "--fault", metavar="KIND[@N][xCOUNT]", action="append", default=[],
        help="inject a fault: rate_limit, overloaded, server_error, drop, stall, malformed, "
        "slow or error_body; @N "
        "hits request N (0-based; default: the next request), xCOUNT repeats it "
        "(e.g. --fault rate_limit@0 --fault overloaded@3x2); may be repeated",
    )
    parser.add_argument("--log-requests", metavar="FILE", default=None,
                        help="append one JSON line per request received (method, path, "
                             "headers, body; keys and tokens masked) to FILE")
    parser.add_argument("--key-env", metavar="NAME", default=None,
                        help="refuse (401) every POST that does not send 'Authorization: "
                             "Bearer <the value of $NAME>' (anthropic: or 'x-api-key: <it>'), "
                             "as a provider refuses a wrong key")
    parser.set_defaults(func=run)


def parse_fault(text: str) -> Any:
    """``KIND[@N][xCOUNT]`` → :class:`ctxfold.emulator.Fault` (UsageError when malformed)."""
    import re

    from ctxfold.cli.common import UsageError
    from ctxfold.emulator import Fault

    m = re.fullmatch(r"([a-z_]+)(?:@(\d+))?(?:x(\d+))?", text.strip())
    if m is None:
        raise UsageError(f"--fault {text!r}: expected KIND[@N][xCOUNT], e.g. rate_limit@0")
    try:
        kind: Any = m[1]  # Fault validates the kind and names the choices
        return Fault(kind, at=int(m[2]) if m[2] else None, count=int(m[3]) if m[3] else 1)
    except ValueError as exc:
        raise UsageError(f"--fault {text!r}: {exc}") from None


def run(args: argparse.Namespace, *, ready: threading.Event | None = None,
        stop: threading.Event | None = None) -> int:
    """Serve until Ctrl-C (or until ``stop`` is set, for tests); ``ready`` is set once the
    base URL has been printed."""
    from ctxfold.cli.common import UsageError, wait_until_stopped
    from ctxfold.emulator import Emulator, load_script
    from ctxfold.kernel.errors import ConfigError

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, got {args.port}")
    script = load_script(args.script) if args.script else None
    key_env = getattr(args, "key_env", None)
    require_key = os.environ.get(key_env) if key_env else None
    if key_env and not require_key:
        raise UsageError(f"--key-env {key_env}: ${key_env} is not set (or empty)")
    faults = [parse_fault(f) for f in getattr(args, "fault", [])]
    emulator = Emulator(args.profile, window=args.window, script=script, port=args.port,
                        faults=faults, log_requests=getattr(args, "log_requests", None),
                        require_key=require_key)
    try:
        base_url = emulator.start()
    except OSError as exc:
        raise ConfigError(f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror}; "
                          "choose another --port or 0 for an ephemeral one") from None
    print(base_url, flush=True)
    if emulator.profile.wire == "anthropic":
        # The Anthropic SDKs and Claude Code append /v1/messages to the base URL themselves.
        print(f"point Anthropic clients here: ANTHROPIC_BASE_URL={base_url} (any key)",
              file=sys.stderr, flush=True)
    return wait_until_stopped(stop, ready, emulator.stop)
