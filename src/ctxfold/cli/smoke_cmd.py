"""``ctxfold smoke seed|resume|continue``: the cost-capped smoke (see :mod:`ctxfold.smoke`).

Offline (``--offline``, or automatically when ``DEEPSEEK_API_KEY`` is unset) the steps run
against the in-process loopback emulator; otherwise against DeepSeek, with a hard spend cap.
Exit status 0 when every assertion held, 1 (message on stderr naming the assertion) otherwise.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ctxfold.cli.common import number_in


def register(subparsers: Any) -> None:
    from ctxfold.smoke.fixtures import DEFAULT_DIR, DEFAULT_MAX_USD

    parser = subparsers.add_parser(
        "smoke",
        aliases=["e2e"],
        help="cost-capped seed -> resume -> continue smoke (offline or live DeepSeek)",
        description="Seed a session below the trigger, resume it unchanged, then push it past "
        "the trigger: one checkpoint, at most one summary, then one real turn without another. "
        "Runs against the loopback emulator with --offline or when DEEPSEEK_API_KEY is unset.",
    )
    parser.add_argument("step", choices=("seed", "resume", "continue"), help="which step")
    parser.add_argument("--offline", action="store_true",
                        help="use the in-process emulator even when DEEPSEEK_API_KEY is set")
    parser.add_argument("--dir", default=DEFAULT_DIR, metavar="DIR",
                        help=f"working directory for the session and meta.json "
                        f"(default: {DEFAULT_DIR})")
    parser.add_argument("--max-usd", type=number_in(0.0, kind=float), default=DEFAULT_MAX_USD,
                        metavar="X",
                        help=f"hard spend cap in USD (default: {DEFAULT_MAX_USD:.2f})")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctxfold.cli.common import load_cli_config
    from ctxfold.smoke.fixtures import SmokeOptions
    from ctxfold.smoke.steps import run_step

    base = load_cli_config(args).config
    options = SmokeOptions(directory=Path(args.dir), offline=True if args.offline else None,
                         max_usd=args.max_usd)
    run_step(args.step, options, base)
    return 0
