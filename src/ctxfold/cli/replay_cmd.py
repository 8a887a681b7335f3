"""``ctxfold replay PATH... [--policy P[,P...]|all] [--profile NAME] [--window N]
[--compact-ratio R] [--estimator NAME] [--format FMT] [--json OUT] [--html OUT] [--demo]``.

Replays recorded sessions under several context policies and prints what each would have
cost (``docs/replay.md``). ``--demo`` replays a session the package generates itself. A
progress bar appears only when stderr is a terminal; on a pipe stdout carries only the
report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ctxfold.cli.common import UsageError
from ctxfold.kernel.errors import ConfigError, CtxfoldError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay sessions under several context policies and compare their cost",
        description="Replay recorded agent sessions (any importer format) under context "
        "policies (ctxfold, append-only, truncate-oldest, codex-like, opencode-like, "
        "openhands-like, masking) and report requests, tokens, cache hits and cost.",
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="session file(s) or folders")
    parser.add_argument("--policy", default="all", metavar="P[,P...]|all",
                        help="policies to replay (default: all)")
    parser.add_argument("--profile", default=None, metavar="NAME",
                        help="price profile: deepseek-flash (default), deepseek-v4-pro, mimo, "
                             "openai")
    parser.add_argument("--window", type=int, default=None, metavar="N",
                        help="context window in tokens (default: the --profile's window, "
                             "e.g. 1048576 for deepseek-flash, 400000 for openai; --demo: "
                             "64000); a smaller window forces maintenance on short sessions")
    parser.add_argument("--compact-ratio", type=float, default=None, metavar="R",
                        help="trigger ratio (default: [agent] compact_ratio)")
    parser.add_argument("--estimator", default=None, metavar="NAME",
                        help="token estimator (default: deepseek)")
    parser.add_argument("--format", default=None, metavar="FMT",
                        help="importer format of the PATHs (default: auto-detect)")
    parser.add_argument("--json", dest="json_out", default=None, metavar="OUT",
                        help="also write the JSON report to OUT ('-' = stdout instead of tables)")
    parser.add_argument("--html", dest="html_out", default=None, metavar="OUT",
                        help="also write a self-contained HTML report with charts to OUT")
    parser.add_argument("--demo", action="store_true",
                        help="replay a built-in, generated coding-agent session (no files)")
    parser.set_defaults(func=run)


def _policies(spec: str, available: list[str]) -> tuple[str, ...]:
    if spec.strip() in ("", "all"):
        return tuple(available)
    names = tuple(n.strip() for n in spec.split(",") if n.strip())
    unknown = [n for n in names if n not in available]
    if unknown:
        raise UsageError(
            f"--policy: unknown policy {', '.join(map(repr, unknown))}; available: "
            f"{', '.join(available)} (or 'all')"
        )
    return names


def _write(path: str, text: str) -> None:
    import os

    from ctxfold.atomic import atomic_write

    umask = os.umask(0)
    os.umask(umask)
    try:
        # Reports are meant to be shared: the user's umask decides, not the 0600 of sessions.
        atomic_write(Path(path), text.encode("utf-8"), mode=0o666 & ~umask)
    except OSError as exc:
        raise ConfigError(f"cannot write report {path}: {exc}; check the directory") from exc


def run(args: argparse.Namespace) -> int:
    import json

    from ctxfold.cli.common import load_cli_config, load_registry
    from ctxfold.importing import expand_paths, import_session
    from ctxfold.replay import ReplaySettings
    from ctxfold.replay.demo import DEMO_WINDOW, demo_session
    from ctxfold.replay.pricing import DEFAULT_PROFILE, get_price
    from ctxfold.replay.report_json import report_json

    if not args.paths and not args.demo:
        raise UsageError("replay: give at least one session PATH, or --demo")
    loaded = load_cli_config(args)
    config = loaded.config
    registry = load_registry(args)
    profile = args.profile or DEFAULT_PROFILE
    try:
        get_price(profile)  # unknown profiles fail before any work
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    if args.window is not None:
        window = args.window
    elif args.demo and not args.paths:
        window = DEMO_WINDOW
    else:
        window = profile_window(profile)
    if window <= 1024:
        raise UsageError(f"--window {window}: must be more than 1024 tokens")
    ratio = args.compact_ratio if args.compact_ratio is not None else config.agent.compact_ratio
    if not 0.30 <= ratio <= 0.95:
        raise UsageError(f"--compact-ratio {ratio}: allowed 0.30 to 0.95")
    settings = ReplaySettings(
        window=window, compact_ratio=ratio, profile=profile,
        estimator=args.estimator or config.estimator.name,
        policies=_policies(args.policy, registry.names("policy")), format=args.format,
    )
    sessions = [demo_session()] if args.demo else []
    failures = 0
    for path in expand_paths(args.paths, registry, args.format):
        try:
            sessions.append(import_session(path, registry, args.format, config=config))
        except CtxfoldError as exc:  # one unreadable session must not hide the others
            print(f"ctxfold: error: {exc}", file=sys.stderr)
            failures += 1
    if not sessions:
        raise ConfigError("replay: no session could be read (see the errors above)")
    results = _run_with_progress(sessions, settings, registry, config)
    report = json.dumps(report_json(results, profile=profile, window=window), indent=2)
    if args.json_out and args.json_out != "-":
        _write(args.json_out, report + "\n")
    if args.html_out:
        from ctxfold.replay.report_html import report_html

        _write(args.html_out, report_html(results, profile=profile, window=window))
    if args.json_out == "-":
        print(report)
    else:
        from ctxfold.replay.report_text import print_report

        print_report(results, profile=profile, window=window, file=sys.stdout)
    return 1 if failures else 0


def profile_window(profile: str) -> int:
    """The context window of the emulator profile behind a pricing profile."""
    from ctxfold.emulator.profiles import get_profile
    from ctxfold.replay.pricing import get_price

    return get_profile(get_price(profile).emulator_profile).window


def _run_with_progress(sessions: list[Any], settings: Any, registry: Any, config: Any) -> Any:
    from ctxfold.replay import replay_sessions

    if not sys.stderr.isatty():
        return replay_sessions(sessions, settings, registry=registry, config=config)
    from rich.console import Console
    from rich.progress import Progress

    steps = sum(1 for s in sessions for m in s.messages if m.role == "assistant")
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("replaying", total=steps)
        return replay_sessions(sessions, settings, registry=registry, config=config,
                               on_step=lambda: progress.advance(task))
