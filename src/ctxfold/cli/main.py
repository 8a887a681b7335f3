"""The ``ctxfold`` command: parse arguments, call the API, print.

Each subcommand lives in its own module with a ``register(subparsers)`` function that adds
its parser and sets ``func``. Command modules import heavy dependencies inside their
handlers so ``ctxfold --help`` stays fast.

Exit codes: 0 success, 1 a ctxfold error (message on stderr), 2 usage error (argparse's,
or a :class:`~ctxfold.cli.common.UsageError` for a flag value only the command can check).
``--config PATH`` is accepted before or after the subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from ctxfold import __version__
from ctxfold.cli.common import UsageError
from ctxfold.kernel.errors import CtxfoldError

#: Subcommand modules, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "ctxfold.cli.config_cmd",
    "ctxfold.cli.emulate_cmd",
    "ctxfold.cli.estimate_cmd",
    "ctxfold.cli.plugins_cmd",
    "ctxfold.cli.tool_result_cmd",
    "ctxfold.cli.sessions_cmd",
    "ctxfold.cli.inspect_cmd",
    "ctxfold.cli.chat_cmd",
    "ctxfold.cli.smoke_cmd",
    "ctxfold.cli.replay_cmd",
    "ctxfold.cli.store_cmd",
    "ctxfold.cli.serve_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (exposed for docs and tests)."""
    parser = argparse.ArgumentParser(
        prog="ctxfold",
        description="Context maintenance for long-running LLM agents.",
    )
    parser.add_argument("--version", action="version", version=f"ctxfold {__version__}")
    _add_config_option(parser, default=None)
    # Not required here: main() names an unknown option first, then a missing command.
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    for sub in _subcommand_parsers(parser):
        # SUPPRESS: absent after the subcommand, the value given before it stays.
        _add_config_option(sub, default=argparse.SUPPRESS)
        # The deepest parser reached reports what it does not know, with its own usage.
        sub.set_defaults(_ctxfold_parser=sub)
    return parser


def _add_config_option(parser: argparse.ArgumentParser, *, default: object) -> None:
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=default,
        help="project config file (default: ./ctxfold.toml when present)",
    )


def _subcommand_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser below ``parser``: subcommands and their actions (``sessions list``…)."""
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:  # argparse exposes subparsers only through its actions
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases share a parser
                found.append(sub)
                found.extend(_subcommand_parsers(sub))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ctxfold`` console script."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    reached: argparse.ArgumentParser = getattr(args, "_ctxfold_parser", parser)
    if unknown:
        reached.error(f"unrecognized arguments: {' '.join(unknown)}")
    if getattr(args, "func", None) is None:
        reached.error("a command is required" if reached is parser else "an action is required")
    try:
        result = args.func(args)
    except UsageError as exc:
        print(f"ctxfold: error: {exc} (see 'ctxfold {args.command} --help')", file=sys.stderr)
        return 2
    except CtxfoldError as exc:
        print(f"ctxfold: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("ctxfold: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
