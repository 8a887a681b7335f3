"""``ctxfold serve``: an OpenAI- and Anthropic-compatible proxy that gives any agent
ctxfold."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

EXTRA_HINT = "pip install 'ctxfold[serve]'"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve an OpenAI- and Anthropic-compatible proxy that keeps every agent's "
             "context",
        description="Serve POST /v1/chat/completions, /v1/responses and /v1/messages "
                    "(streaming or not), /v1/messages/count_tokens, GET /v1/models and "
                    "/healthz. Each request's history is reconciled with "
                    "a ctxfold session and the provider [provider] name selects (the "
                    "loopback emulator by default) is sent ctxfold's view. Prints the base "
                    "URL clients use, then serves until Ctrl-C. See docs/serve.md.",
    )
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8787,
                        help="TCP port (default 8787; 0 = an ephemeral one)")
    parser.add_argument("--window", type=int, default=None,
                        help="the context window ctxfold maintains, in tokens (default: "
                             "the provider's); the provider keeps its own")
    parser.add_argument("--root", metavar="DIR", default=None,
                        help="session directory (default [store] path)")
    parser.add_argument("--key-env", metavar="NAME", default="CTXFOLD_SERVE_KEY",
                        help="environment variable holding the proxy key; when it is set, "
                             "clients must send 'Authorization: Bearer <key>' (default "
                             "CTXFOLD_SERVE_KEY)")
    parser.add_argument("--lock-wait", type=float, default=30.0, metavar="SECONDS",
                        help="how long a request waits for a fork another request is "
                             "creating under the same name, then 409 (default 30)")
    parser.add_argument("--fork-after", type=float, default=2.0, metavar="SECONDS",
                        help="how long a request whose history continues a session another "
                             "request holds waits before it continues in a fork of it "
                             "(default 2)")
    parser.add_argument("--keepalive", type=float, default=15.0, metavar="SECONDS",
                        help="a stream that has had nothing to send this long sends an SSE "
                             "comment (default 15)")
    parser.add_argument("--max-open-mib", type=int, default=512, metavar="MIB",
                        help="message text the open sessions may hold in memory, least "
                             "recently used closed first (default 512)")
    parser.add_argument("--upstream-retries", type=int, default=0, metavar="N",
                        help="how often the proxy itself retries a 429/5xx from upstream "
                             "(default 0: the client retries what it gets)")
    parser.add_argument("--max-rounds", type=int, default=4, metavar="N",
                        help="upstream calls per answer, use_capability rounds included "
                             "(default 4)")
    parser.add_argument("--allow-host", metavar="NAME", action="append", default=[],
                        help="a Host name clients may use besides the bound address and "
                             "loopback names (repeatable; '*' turns the Host check off)")
    parser.add_argument("--allow-origin", metavar="ORIGIN", action="append", default=[],
                        help="a web page origin (e.g. http://localhost:3000) allowed to send "
                             "requests; others carrying an Origin header are refused "
                             "(repeatable; '*' turns the Origin check off)")
    parser.add_argument("--max-body-mib", type=int, default=32, metavar="N",
                        help="largest request body, in MiB (default 32; larger: 413)")
    parser.add_argument("--header-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="time for a request's headers to arrive (default 10)")
    parser.add_argument("--body-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="time for a request's whole body to arrive, then 408 (default 60)")
    parser.add_argument("--idle-timeout", type=float, default=5.0, metavar="SECONDS",
                        help="an idle keep-alive connection is closed after (default 5)")
    parser.add_argument("--script", metavar="FILE", default=None,
                        help="replies of the built-in emulator upstream (only with [provider] "
                             "name = \"emulator\", the default): a JSON list as for ctxfold "
                             "emulate --script, e.g. to demo a tool loop with nothing set up")
    parser.add_argument("--log-requests", metavar="FILE", default=None,
                        help="with the emulator upstream: append what the proxy sent it to "
                             "FILE, one masked JSON line per request (as ctxfold emulate "
                             "--log-requests)")
    parser.set_defaults(func=run)


def _check(args: argparse.Namespace) -> None:
    from ctxfold.cli.common import UsageError

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, got {args.port}")
    if args.window is not None and args.window <= 0:
        raise UsageError(f"--window must be a positive number of tokens, got {args.window}")
    if not args.lock_wait > 0:
        raise UsageError(f"--lock-wait must be more than 0 seconds, got {args.lock_wait:g}")
    if not args.fork_after >= 0:
        raise UsageError(f"--fork-after must be 0 or more seconds, got {args.fork_after:g}")
    if not args.keepalive > 0:
        raise UsageError(f"--keepalive must be more than 0 seconds, got {args.keepalive:g}")
    if args.max_open_mib < 1:
        raise UsageError(f"--max-open-mib must be at least 1, got {args.max_open_mib}")
    if args.upstream_retries < 0:
        raise UsageError(f"--upstream-retries must be 0 or more, got {args.upstream_retries}")
    if args.max_rounds < 1:
        raise UsageError(f"--max-rounds must be at least 1, got {args.max_rounds}")
    if not args.key_env:
        raise UsageError("--key-env must name an environment variable")
    if args.max_body_mib < 1:
        raise UsageError(f"--max-body-mib must be at least 1, got {args.max_body_mib}")
    for flag in ("header_timeout", "body_timeout", "idle_timeout"):
        if not getattr(args, flag) > 0:
            raise UsageError(f"--{flag.replace('_', '-')} must be more than 0 seconds")


def _guard(args: argparse.Namespace) -> Any:
    """The request checks and limits the flags ask for."""
    from ctxfold.serve.guard import MIB, GuardSettings

    return GuardSettings(
        allowed_hosts=tuple(args.allow_host),
        allowed_origins=tuple(args.allow_origin),
        max_body=args.max_body_mib * MIB,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        idle_timeout=args.idle_timeout)


def _require_extra() -> None:
    from ctxfold.kernel.errors import ConfigError

    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"ctxfold serve needs the 'serve' extra ({exc.name} is not "
                          f"installed): {EXTRA_HINT}") from None


def _emulator_options(args: argparse.Namespace, loaded: Any) -> Any:
    """Provider options carrying ``--script`` / ``--log-requests`` for the emulator
    upstream (else ``None``)."""
    script, log = getattr(args, "script", None), getattr(args, "log_requests", None)
    if not script and not log:
        return None
    from ctxfold.cli.common import UsageError
    from ctxfold.emulator import load_script
    from ctxfold.emulator.plugin import EmulatorOptions
    from ctxfold.kernel.kinds import ProviderOptions

    name = loaded.config.provider.name
    if name != "emulator":
        flag = "--script" if script else "--log-requests"
        raise UsageError(f"{flag} is for the built-in emulator upstream, but [provider] name "
                         f"is {name!r}; drop {flag} or select the emulator")
    return ProviderOptions(plugin=EmulatorOptions(
        script=load_script(script) if script else None, log_requests=log))


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def run(args: argparse.Namespace, *, ready: threading.Event | None = None,
        stop: threading.Event | None = None) -> int:
    """Serve until Ctrl-C (or until ``stop`` is set, for tests); ``ready`` is set once the
    base URL has been printed."""
    _check(args)
    _require_extra()
    from ctxfold.cli.common import load_cli_config, load_registry, wait_until_stopped
    from ctxfold.engine.opening import create_provider
    from ctxfold.serve.proxy import ServeSettings, build_proxy
    from ctxfold.serve.server import ProxyServer

    loaded = load_cli_config(args)
    registry = load_registry(args)
    settings = ServeSettings(host=args.host, port=args.port, window=args.window,
                             key_env=args.key_env, lock_wait=args.lock_wait,
                             fork_after=args.fork_after, keepalive=args.keepalive,
                             upstream_retries=args.upstream_retries,
                             max_open_bytes=args.max_open_mib * 1024 * 1024,
                             max_rounds=args.max_rounds)
    if not _loopback(args.host) and not os.environ.get(args.key_env):
        print(f"ctxfold: warning: serving on {args.host} without a proxy key: anyone who "
              f"reaches it can use the provider; set ${args.key_env}", file=sys.stderr)
    provider = create_provider(loaded, registry=registry, options=_emulator_options(args, loaded))
    proxy = build_proxy(loaded, provider=provider, settings=settings, store_path=args.root)
    logs = _log_to_stderr()
    try:
        server = ProxyServer(proxy, guard=_guard(args), access_log=True).start()
    except BaseException:
        proxy.close()
        logs()
        raise
    print(f"{server.base_url}/v1", flush=True)

    def stopping() -> None:
        server.stop()
        logs()

    return wait_until_stopped(stop, ready, stopping)


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time, each line masked of secrets (an
    access-log line carries the query string)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass

    def format(self, record: logging.LogRecord) -> str:
        from ctxfold.secrets import redact_text

        return redact_text(super().format(record))


def _log_to_stderr() -> Callable[[], None]:
    """Send uvicorn's and the proxy's INFO lines to stderr; returns the undo."""
    handler = _Stderr()
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    loggers = [logging.getLogger(name) for name in ("uvicorn", "ctxfold.serve")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)

    def undo() -> None:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)

    return undo
