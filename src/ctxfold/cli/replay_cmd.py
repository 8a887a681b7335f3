"""``ctxfold replay PATH... [--policy P[,P...]|all] [--profile NAME] [--window N]
[--reserve-output N] [--summary-tokens N] [--compact-ratio R] [--estimator NAME]
[--format FMT] [--json OUT] [--html OUT] [--per-request] [--demo]
[--summarizer-provider NAME [--max-usd X]]``.

Replays recorded sessions under several context policies and prints what each would have
cost and what its requests still carried (``docs/replay.md``). ``--demo`` replays a session the
package generates itself. On a terminal, stderr shows a progress bar and one line per finished
session; on a pipe stdout carries only the report.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from ctxfold.cli.common import UsageError
from ctxfold.kernel.errors import ConfigError, CtxfoldError


def register(subparsers: Any) -> None:
    from ctxfold.replay.live import DEFAULT_MAX_USD
    from ctxfold.replay.runner import DEFAULT_RESERVE_OUTPUT, DEFAULT_SUMMARY_TOKENS

    parser = subparsers.add_parser(
        "replay",
        help="replay sessions under several context policies: cost beside fidelity",
        description="Replay recorded agent sessions (any importer format) under context "
        "policies (ctxfold, the *-like reconstructions, and the real LangChain, pydantic-ai-"
        "harness and OpenAI Agents SDK code with the peers extra) and report cost, cache "
        "hits and what each policy's requests still carried (fidelity).",
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="session file(s) or folders")
    parser.add_argument("--policy", default="all", metavar="P[,P...]|all",
                        help="policies to replay (default: all available)")
    parser.add_argument("--profile", default=None, metavar="NAME",
                        help="price profile: deepseek-flash (default), deepseek-v4-pro, mimo, "
                             "openai, anthropic-sonnet, anthropic-haiku")
    parser.add_argument("--window", type=int, default=None, metavar="N",
                        help="context window in tokens (default: the --profile's window, "
                             "e.g. 1048576 for deepseek-flash, 400000 for openai; --demo: "
                             "64000); a smaller window forces maintenance on short sessions")
    parser.add_argument("--reserve-output", type=int, default=DEFAULT_RESERVE_OUTPUT,
                        metavar="N", help="output reservation taken off the window for every "
                        f"request of every policy (default {DEFAULT_RESERVE_OUTPUT})")
    parser.add_argument("--summary-tokens", type=int, default=None, metavar="N",
                        help="write every policy's summaries, ctxfold's included, to N tokens "
                        "(the equal-length sensitivity run; default: each policy's own length, "
                        f"ctxfold's window/48 and {DEFAULT_SUMMARY_TOKENS} for those that ask "
                        "none)")
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
    parser.add_argument("--per-request", action="store_true",
                        help="put every request's record in the JSON report")
    parser.add_argument("--demo", action="store_true",
                        help="replay a built-in, generated coding-agent session (no files)")
    parser.add_argument("--summarizer-provider", default=None, metavar="NAME",
                        help="write every policy's summaries with this provider's model (e.g. "
                        "deepseek; its key variable, e.g. DEEPSEEK_API_KEY, must be set) instead "
                        "of the offline extractive summarizer")
    parser.add_argument("--max-usd", type=float, default=None, metavar="X",
                        help="spend cap of --summarizer-provider in USD, priced with --profile "
                        f"(default {DEFAULT_MAX_USD:.2f})")
    parser.set_defaults(func=run)


def _policies(spec: str, registry: Any) -> tuple[tuple[str, ...], dict[str, str]]:
    """The policies to run, and (for ``all``) the registered ones that cannot run here."""
    known = registry.names("policy")
    missing = registry.unavailable("policy")
    if spec.strip() in ("", "all"):
        return tuple(registry.available("policy")), missing
    names = tuple(n.strip() for n in spec.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(
            f"--policy: unknown policy {', '.join(map(repr, unknown))}; available: "
            f"{', '.join(known)} (or 'all')"
        )
    blocked = [missing[n] for n in names if n in missing]
    if blocked:
        raise UsageError("--policy: " + "; ".join(blocked))
    return names, {}


def _check_output(path: str | None, flag: str) -> None:
    """Fail before any work when a report could not be written."""
    if not path or path == "-":
        return
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise UsageError(f"{flag} {path}: is a directory; give a file name")
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: directory {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{flag} {path}: directory {parent} is not writable")


def _write(path: str, text: str) -> None:
    from ctxfold.atomic import atomic_write

    umask = os.umask(0)
    os.umask(umask)
    try:
        # Reports are meant to be shared: the user's umask decides, not the 0600 of sessions.
        atomic_write(Path(path), text.encode("utf-8"), mode=0o666 & ~umask)
    except OSError as exc:
        raise ConfigError(f"cannot write report {path}: {exc}; check the directory") from exc


def _check_numbers(window: int, reserve: int, summary_tokens: int | None, ratio: float) -> None:
    if window <= 1024:
        raise UsageError(f"--window {window}: must be more than 1024 tokens")
    if not 0 <= reserve <= window // 2:
        raise UsageError(f"--reserve-output {reserve}: allowed 0 to half the window "
                         f"({window // 2})")
    if summary_tokens is not None and not 64 <= summary_tokens <= 32_768:
        raise UsageError(f"--summary-tokens {summary_tokens}: allowed 64 to 32768")
    if not 0.30 <= ratio <= 0.95:
        raise UsageError(f"--compact-ratio {ratio}: allowed 0.30 to 0.95")


def run(args: argparse.Namespace) -> int:
    import json

    from ctxfold.cli.common import load_cli_config, load_registry
    from ctxfold.importing import expand_paths, import_session
    from ctxfold.replay import ReplaySettings
    from ctxfold.replay.demo import DEMO_WINDOW, demo_session
    from ctxfold.replay.live import DEFAULT_MAX_USD
    from ctxfold.replay.pricing import DEFAULT_PROFILE, get_price
    from ctxfold.replay.report_json import report_json
    from ctxfold.replay.runner import DEFAULT_SUMMARY_TOKENS

    if not args.paths and not args.demo:
        raise UsageError("replay: give at least one session PATH, or --demo")
    _check_output(args.json_out, "--json")
    _check_output(args.html_out, "--html")
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
    ratio = args.compact_ratio if args.compact_ratio is not None else config.agent.compact_ratio
    _check_numbers(window, args.reserve_output, args.summary_tokens, ratio)
    if args.max_usd is not None and not args.summarizer_provider:
        raise UsageError("--max-usd: only with --summarizer-provider (the offline replay "
                         "spends nothing)")
    if args.max_usd is not None and args.max_usd <= 0:
        raise UsageError(f"--max-usd {args.max_usd}: must be above 0")
    names, missing = _policies(args.policy, registry)
    settings = ReplaySettings(
        window=window, compact_ratio=ratio, profile=profile,
        estimator=args.estimator or config.estimator.name, policies=names, format=args.format,
        reserve_output=args.reserve_output, summary_tokens=args.summary_tokens,
        summarizer_provider=args.summarizer_provider,
        max_usd=args.max_usd if args.max_usd is not None else DEFAULT_MAX_USD,
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
    for name, why in missing.items():
        print(f"ctxfold: notice: not running {name}: {why}", file=sys.stderr)
    results = _run_with_progress(sessions, settings, registry, config)
    common = {"profile": profile, "window": window}
    report = json.dumps(report_json(results, **common, reserve_output=args.reserve_output,
                                    summary_tokens=args.summary_tokens or DEFAULT_SUMMARY_TOKENS,
                                    equal_summary_length=args.summary_tokens is not None,
                                    summarizer=args.summarizer_provider or "extractive",
                                    per_request=args.per_request, missing=missing), indent=2)
    if args.json_out and args.json_out != "-":
        _write(args.json_out, report + "\n")
    if args.html_out:
        from ctxfold.replay.report_html import report_html

        _write(args.html_out, report_html(results, **common, reserve_output=args.reserve_output))
    if args.json_out == "-":
        print(report)
    else:
        from ctxfold.replay.report_text import print_report

        print_report(results, **common, file=sys.stdout, reserve_output=args.reserve_output,
                     missing=missing)
    return 1 if failures else 0


def profile_window(profile: str) -> int:
    """The context window of the emulator profile behind a pricing profile."""
    from ctxfold.emulator.profiles import get_profile
    from ctxfold.replay.pricing import get_price

    price = get_price(profile)
    return price.window or get_profile(price.emulator_profile).window


def _run_with_progress(sessions: list[Any], settings: Any, registry: Any, config: Any) -> Any:
    from ctxfold.replay import replay_sessions

    if not sys.stderr.isatty():
        return replay_sessions(sessions, settings, registry=registry, config=config)
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    steps = sum(1 for s in sessions for m in s.messages if m.role == "assistant")
    started = time.monotonic()

    def done(index: int, result: Any) -> None:
        failed = [n for n, r in result.policies.items() if r.failed]
        console.print(f"[{index + 1}/{len(sessions)}] {result.name}: {result.requests} "
                      f"requests, {time.monotonic() - started:.0f} s"
                      + (f"; failed: {', '.join(failed)}" if failed else ""), markup=False,
                      highlight=False)

    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("replaying", total=steps)
        return replay_sessions(sessions, settings, registry=registry, config=config,
                               on_step=lambda: progress.advance(task), on_session=done)
