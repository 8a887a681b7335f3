"""``ctxfold config``: ``show`` the effective configuration, ``init`` a commented file,
``migrate`` retired keys out of a file (design §8.3)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DEFAULT_INIT_PATH = "ctxfold.toml"

#: One comment line per key written by ``config init`` (keys without one get none).
_HELP = {
    "agent.compact_ratio": "The only automatic trigger: maintain when the request estimate "
    "reaches\n# floor(context_window x compact_ratio). Allowed 0.30 to 0.95.",
    "agent.max_output_tokens": "0 = provider auto (DeepSeek: omitted; MiMo/Responses: "
    "16K/32K/64K ladder).",
    "agent.effort": "Reasoning depth: none | low | medium | high | max.",
    "provider.name": "deepseek | mimo | responses | emulator | <plugin> (`ctxfold plugins` "
    "lists them).",
    "provider.base_url": 'Empty = the provider\'s default endpoint, e.g. '
    '"https://api.deepseek.com".',
    "provider.api_key_env": 'NAME of the environment variable holding the API key, e.g. '
    '"DEEPSEEK_API_KEY".\n# Never put the key itself in this file.',
    "provider.model": 'Empty = the model the provider declares (`ctxfold config show` tells).',
    "provider.context_window": "Model context window in tokens; 0 = the provider's declared "
    "window.",
    "provider.cache_ttl_minutes": "Prompt-cache TTL for resume labelling; 0 = the provider's "
    "documented TTL.",
    "provider.profile": "The provider the emulator imitates (deepseek | mimo | responses; "
    "empty = deepseek).",
    "provider.timeout_seconds": "Total time allowed for one request, streaming included.",
    "provider.max_retries": "Retries on 408/409/429/5xx/connection errors.",
    "estimator.name": "heuristic | tiktoken | deepseek | <plugin>",
    "summarizer.name": "llm | extractive | <plugin>",
    "summarizer.model": "Empty = the provider's model.",
    "pruner.name": "head-tail | <plugin>",
    "checkpoint.extract_rules": "Pin the constraints the user states (always / never / must "
    "...) in every checkpoint.",
    "checkpoint.pins_ratio": "Budget of the pinned rules, as a share of the window.",
    "checkpoint.check": "repair | second-pass | off: keep what a summary lost verbatim.",
    "checkpoint.max_summaries_per_hour": "Stop with an error before a summary that would make "
    "more than this many in the last hour; 0 = no cap.",
    "store.name": "fs | postgres | <plugin>",
    "store.sidecar_format": "v3 | <plugin>",
    "store.path": "Session directory, relative to the working directory.",
    "store.dsn_env": 'NAME of the environment variable holding the PostgreSQL DSN (store '
    '"postgres"; empty = CTXFOLD_POSTGRES_DSN).\n# Never put the DSN itself in this file.',
    "store.connect_timeout_seconds": "Database store: seconds to wait for a connection.",
    "store.statement_timeout_seconds": "Database store: the longest one statement may run; "
    "a server that does not answer is given up on 2 s later.",
    "plugins.disabled": 'Plugins to block, e.g. ["estimators.tiktoken"] or an entry-point '
    "name.",
}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "config",
        help="show, create or migrate the configuration",
        description="Show the effective configuration, write a default file, or remove "
        "retired keys from a file.",
    )
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)

    show = sub.add_parser("show", help="print the effective configuration and its sources")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=run_show)

    init = sub.add_parser("init", help="write a commented default config file")
    init.add_argument("path", nargs="?", default=DEFAULT_INIT_PATH, metavar="PATH",
                      help=f"file to write (default ./{DEFAULT_INIT_PATH})")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(func=run_init)

    migrate = sub.add_parser("migrate", help="remove retired [agent] keys from a file")
    migrate.add_argument("path", metavar="PATH", help="the TOML file to migrate")
    migrate.add_argument("--dry-run", action="store_true",
                         help="print the diff, change nothing")
    migrate.set_defaults(func=run_migrate)


# -- show --------------------------------------------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


def effective_rows(loaded: Any) -> list[tuple[str, str, Any, str]]:
    """``(section, key, redacted value, source)`` for every shown key, in schema order.

    Retired keys are shown only when something set them.
    """
    import attrs

    from ctxfold.config.load import DEFAULT_SOURCE
    from ctxfold.secrets import redact_value as redact

    legacy = _legacy_keys()
    rows = []
    for section in attrs.fields(type(loaded.config)):
        table = getattr(loaded.config, section.name)
        for field in attrs.fields(type(table)):
            dotted = f"{section.name}.{field.name}"
            source = loaded.sources.get(dotted, DEFAULT_SOURCE)
            if dotted in legacy and source == DEFAULT_SOURCE:
                continue
            rows.append((section.name, field.name, redact(dotted, getattr(table, field.name)),
                         source))
    return rows


def _legacy_keys() -> set[str]:
    from ctxfold.config.migrate import default_migrations

    return {f"{m.keys[0]}.{k}" for m in default_migrations() for k in m.keys[1]}


def _unknown_strategies(args: argparse.Namespace, loaded: Any) -> bool:
    # `show` is a diagnostic: report unknown strategy names, still print the config, and
    # exit 1 (every other command refuses such a config).
    from ctxfold.cli.common import load_registry
    from ctxfold.config.load import validate_strategy_names
    from ctxfold.kernel.errors import CtxfoldError

    try:
        validate_strategy_names(loaded, load_registry(args, validate=False))
    except CtxfoldError as exc:
        print(f"ctxfold: error: {exc}", file=sys.stderr)
        return True
    return False


def run_show(args: argparse.Namespace) -> int:
    from ctxfold.cli.common import load_cli_config

    loaded = load_cli_config(args)
    status = 1 if _unknown_strategies(args, loaded) else 0
    rows = effective_rows(loaded)
    legacy = _legacy_keys()
    if args.json:
        config: dict[str, dict[str, Any]] = {}
        for section, key, value, source in rows:
            config.setdefault(section, {})[key] = {"value": value, "source": source}
        out = {"config": config, "files": [str(p) for p in loaded.files],
               "notices": list(loaded.notices)}
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return status
    files = ", ".join(str(p) for p in loaded.files) or "none"
    print(f"# effective ctxfold configuration (files read: {files})")
    current = None
    for section, key, value, source in rows:
        if section != current:
            print(f"{'' if current is None else chr(10)}[{section}]")
            current = section
        note = " (retired, ignored)" if f"{section}.{key}" in legacy else ""
        line = f"{key} = {_toml_value(value)}" if value is not None else f"# {key} = (unset)"
        print(f"{line:<40} # {source}{note}")
    return status


# -- init --------------------------------------------------------------------------------------


def default_config_text() -> str:
    """The commented default configuration written by ``ctxfold config init``."""
    import attrs

    from ctxfold.kernel.config import Config
    from ctxfold.kernel.registry import Registry, strategy_fill

    legacy = _legacy_keys()
    lines = [
        "# ctxfold configuration. Documentation: docs/configuration.md",
        "# Precedence: defaults < user config.toml < this file < CTXFOLD_<SECTION>_<KEY> "
        "environment < flags.",
        "# `ctxfold config show` prints the effective values and where each came from.",
    ]
    config = strategy_fill(Config(), Registry.from_config())  # the names plugins declare
    for section in attrs.fields(Config):
        table = getattr(config, section.name)
        lines += ["", f"[{section.name}]"]
        for field in attrs.fields(type(table)):
            dotted = f"{section.name}.{field.name}"
            if dotted in legacy:
                continue
            if dotted in _HELP:
                lines.append(f"# {_HELP[dotted]}")
            lines.append(f"{field.name} = {_toml_value(getattr(table, field.name))}")
    return "\n".join(lines) + "\n"


def run_init(args: argparse.Namespace) -> int:
    from ctxfold.atomic import atomic_write
    from ctxfold.kernel.errors import ConfigError

    path = Path(args.path)
    if path.is_dir():
        raise ConfigError(f"{path} is a directory; give a file path such as {path}/ctxfold.toml")
    if not path.parent.is_dir():
        raise ConfigError(f"{path}: directory {path.parent} does not exist; create it first")
    if path.exists() and not args.force:
        raise ConfigError(f"{path} already exists; use --force to overwrite it, or "
                          "`ctxfold config show` to see the effective configuration")
    atomic_write(path, default_config_text().encode("utf-8"), mode=0o600)
    print(f"wrote {path}")
    return 0


# -- migrate -----------------------------------------------------------------------------------


def run_migrate(args: argparse.Namespace) -> int:
    from ctxfold.config.migrate import migrate_file

    result = migrate_file(args.path, dry_run=args.dry_run)
    if not result.changed:
        print(f"{args.path}: nothing to migrate")
    elif args.dry_run:
        sys.stdout.write(result.diff)
        print(f"{args.path}: would remove {len(result.removed)} line(s); nothing written "
              "(--dry-run)")
    else:
        for line, key in result.removed:
            print(f"{args.path}:{line}: removed {key}")
    for key in result.kept:
        print(f"{args.path}: {key} is inside an inline table and was not removed; edit it "
              "by hand (it is ignored on load)", file=sys.stderr)
    return 0
