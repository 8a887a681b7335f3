"""The configuration load pipeline (design §8.1).

Layers, lowest to highest precedence::

    built-in defaults < user file < project file < CTXFOLD_<SECTION>_<KEY> env < CLI flags

* user file: the ``user_config_path`` argument, else ``$CTXFOLD_CONFIG_HOME/config.toml``,
  else ``platformdirs.user_config_dir("ctxfold")/config.toml``; optional.
* project file: the explicit ``--config`` path (must exist), else ``ctxfold.toml`` in ``cwd``.
* environment: ``CTXFOLD_AGENT_COMPACT_RATIO=0.7`` etc., parsed by the field's type. A
  ``CTXFOLD_`` variable that starts with a section name but names no key is an error.
* flags: ``cli_overrides`` keyed ``"section.key"`` (strings are parsed like env values).

Every layer is validated on its own (strict types, unknown keys, ranges), so an error names
the file (and line), environment variable or flag it came from, the key, the bad value and
what is allowed. Retired keys go through the ``config_migration`` strategies (built in:
``legacy-multi-threshold``, design §8.2): they load, are zeroed, and produce exactly one notice.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from ctxfold.config.layers import Layer, project_file, user_file
from ctxfold.config.migrate import default_migrations
from ctxfold.config.strict import (
    SECTIONS,
    WrongType,
    all_problems,
    allowed_values,
    parse_text,
    strict_converter,
    type_name,
    unknown_key,
)
from ctxfold.config.toml_lexer import scan_pairs
from ctxfold.kernel.compat import LEGACY_AGENT_KEYS
from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import ConfigMigration
from ctxfold.kernel.errors import ConfigError, ConfigSyntaxError, PluginError
from ctxfold.kernel.kinds import KIND_BY_NAME
from ctxfold.kernel.registry import STRATEGY_KEYS, Registry, strategy_fill
from ctxfold.secrets import holds_a_secret_not_a_name, show_value

ENV_PREFIX = "CTXFOLD_"
DEFAULT_SOURCE = "default"

@attrs.frozen
class LoadedConfig:
    """The effective configuration and where each value came from.

    ``sources`` maps every dotted key to ``"default"``, ``"user file PATH"``,
    ``"project file PATH"``, ``"env CTXFOLD_…"`` or ``"flag --…"``. ``notices`` are messages
    for the user (at most one migration notice). ``files`` are the config files read.
    """

    config: Config
    sources: Mapping[str, str]
    notices: tuple[str, ...] = ()
    files: tuple[Path, ...] = ()


# -- layers ------------------------------------------------------------------------------------


def _read_file(path: Path, label: str) -> Layer:
    source = f"{label} {path}"
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read ({exc.strerror}); check the path "
                          "and permissions") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not UTF-8 (byte {exc.start}); save it as UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: invalid TOML: {exc}; fix the syntax") from None
    except RecursionError:
        raise ConfigError(f"{source}: invalid TOML: arrays or tables nested too deeply") from None
    except ValueError as exc:  # tomllib: an integer of more than 4,300 digits
        raise ConfigError(f"{source}: invalid TOML value: {exc}") from None
    return Layer(source=source, data=data, lines=_key_lines(text))


def _key_lines(text: str) -> dict[str, int]:
    try:
        return {".".join(p.path): p.line for p in scan_pairs(text)}
    except ConfigSyntaxError:  # line numbers are a courtesy; tomllib already accepted the text
        return {}


def _env_layer(env: Mapping[str, str], legacy: frozenset[str]) -> Layer:
    layer = Layer(source="env", data={})
    problems = []
    for var in sorted(env):
        rest = var[len(ENV_PREFIX):] if var.startswith(ENV_PREFIX) else ""
        section = next((s for s in SECTIONS if rest.startswith(s.upper() + "_")), None)
        if section is None:
            continue  # CTXFOLD_CONFIG_HOME and friends are not settings
        name = rest[len(section) + 1 :].lower()
        dotted = f"{section}.{name}"
        fields = attrs.fields_dict(SECTIONS[section])
        if name not in fields or rest[len(section) + 1 :] != name.upper():
            known = ", ".join(f"{ENV_PREFIX}{section.upper()}_{f.upper()}"
                              for f in fields if f not in legacy)
            problems.append(f"env {var}: no setting {dotted} (value not shown); "
                            f"allowed variables for [{section}]: {known}; unset it")
            continue
        _put(layer, dotted, env[var], f"env {var}", legacy, problems)
    if problems:
        raise ConfigError(_join(problems))
    return layer


def _flag_layer(overrides: Mapping[str, Any], flag_names: Mapping[str, str],
                legacy: frozenset[str]) -> Layer:
    layer = Layer(source="flags", data={})
    problems = []
    for dotted, value in overrides.items():
        if value is None:
            continue  # an option that was not given
        flag = flag_names.get(dotted) or "--" + dotted.rpartition(".")[2].replace("_", "-")
        section, _, name = dotted.partition(".")
        if section not in SECTIONS or name not in attrs.fields_dict(SECTIONS[section]):
            problems.append(f"flag {flag}: {dotted!r} is not a setting; "
                            f"allowed tables: {', '.join(SECTIONS)}")
            continue
        _put(layer, dotted, value, f"flag {flag}", legacy, problems)
    if problems:
        raise ConfigError(_join(problems))
    return layer


def _put(layer: Layer, dotted: str, value: Any, origin: str, legacy: frozenset[str],
         problems: list[str]) -> None:
    section, _, name = dotted.partition(".")
    if isinstance(value, str) and dotted not in legacy:
        try:
            value = parse_text(value, dotted)
        except WrongType:
            problems.append(f"{origin}: {dotted} = {show_value(dotted, value)} cannot be read as "
                            f"{type_name(attrs.fields_dict(SECTIONS[section])[name].type)}; "
                            f"allowed: {allowed_values(dotted)}")
            return
    layer.data.setdefault(section, {})[name] = value
    layer.origins[dotted] = origin


def _join(problems: list[str]) -> str:
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} configuration problems:\n  " + "\n  ".join(problems)


# -- the pipeline ------------------------------------------------------------------------------


def _validate(layer: Layer, unclaimed: frozenset[str]) -> None:
    # Retired schema fields no migration strategy claims (plugin disabled) are unknown keys:
    # loading them as-is would break "always zero in memory".
    stray = [k for k in layer.dotted_keys() if k in unclaimed]
    found = [unknown_key(layer, [k.partition(".")[0]], k.partition(".")[2]) for k in stray]
    found += all_problems(layer, frozenset(stray))
    if found:
        raise ConfigError(_join(found))


def _migration_notice(found: list[tuple[str, str]], files: dict[str, Path]) -> str:
    parts, fixes = [], []
    for source in dict.fromkeys(s for s, _ in found):
        keys = ", ".join(k for s, k in found if s == source)
        parts.append(f"{keys} in {source}")
        if source in files:
            fixes.append(f"run `ctxfold config migrate {files[source]}`")
        else:
            fixes.append(f"unset {source.removeprefix('env ')}" if source.startswith("env ")
                         else f"drop {source.removeprefix('flag ')}")
    return ("retired configuration keys were ignored (loaded as zero; compact_ratio is the "
            f"only trigger now): {'; '.join(parts)}. To clean up: {'; '.join(fixes)}.")


def load_config(
    config_path: str | Path | None = None,
    *,
    cli_overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    user_config_path: Path | None = None,
    registry: Registry | None = None,
    flag_names: Mapping[str, str] | None = None,
) -> LoadedConfig:
    """Load, merge and validate the configuration (see the module docstring for the layers).

    ``env`` defaults to ``os.environ`` and ``cwd`` to the current directory.
    ``flag_names`` maps ``"section.key"`` to the flag spelling used in messages and sources
    (default ``--key-with-dashes``). With a ``registry``, retired keys are normalised by its
    ``config_migration`` strategies and strategy names are checked
    (:func:`validate_strategy_names`); without one, the built-in migrations are used.
    Every ``[provider]`` value left unset is filled in from what the named provider declares
    (source ``provider default (<name>)``), so naming a provider is enough.
    Raises :class:`ConfigError` naming the file/variable/flag, key, value and allowed values.
    """
    env = os.environ if env is None else env
    cwd = Path.cwd() if cwd is None else Path(cwd)
    migrations: list[ConfigMigration] = default_migrations(registry)
    legacy = frozenset(f"{m.keys[0]}.{k}" for m in migrations for k in m.keys[1])
    layers: list[Layer] = []
    files: dict[str, Path] = {}
    user = user_file(user_config_path, env)
    project = project_file(config_path, cwd)
    for path, label in ((user, "user file"), (project, "project file")):
        if path is not None and (label == "project file" or path.is_file()):
            layer = _read_file(path, label)
            files[layer.source] = path
            layers.append(layer)
    layers.append(_env_layer(env, legacy))
    layers.append(_flag_layer(cli_overrides or {}, flag_names or {}, legacy))

    merged: dict[str, Any] = {}
    sources = {f"{s}.{f.name}": DEFAULT_SOURCE for s, c in SECTIONS.items()
               for f in attrs.fields(c)}
    found: list[tuple[str, str]] = []
    retired = frozenset(f"agent.{k}" for k in LEGACY_AGENT_KEYS)
    for layer in layers:
        layer.legacy_names = frozenset(k.partition(".")[2] for k in legacy | retired)
        for migration in migrations:
            layer.data, keys = migration.normalize(layer.data)
            found.extend((layer.origins.get(k, layer.source), k) for k in keys)
        _validate(layer, retired - legacy)
        for dotted in layer.dotted_keys():
            section, _, name = dotted.partition(".")
            merged.setdefault(section, {})[name] = layer.data[section][name]
            sources[dotted] = layer.origins.get(dotted, layer.source)
    config = strict_converter().structure(merged, Config)
    config = _fill_defaults(config, sources, registry)
    notices: tuple[str, ...] = (_migration_notice(found, files),) if found else ()
    for key, value, example in (
            ("provider.api_key_env", config.provider.api_key_env, "DEEPSEEK_API_KEY"),
            ("store.dsn_env", config.store.dsn_env, "CTXFOLD_POSTGRES_DSN")):
        if holds_a_secret_not_a_name(key, value):
            notices += (f"{sources.get(key, 'config')}: {key} holds something that is not an "
                        "environment variable name (a pasted secret?); put the variable's name "
                        f"there (e.g. {example}) and the secret in that variable, then remove "
                        "it from the file",)
    loaded = LoadedConfig(config=config, sources=sources, notices=notices,
                          files=tuple(files.values()))
    if registry is not None:
        validate_strategy_names(loaded, registry)
    return loaded


def _fill_defaults(config: Config, sources: dict[str, str], registry: Registry | None) -> Config:
    """:meth:`Registry.resolve` of ``config``, recording in ``sources`` where each filled value
    came from. An unknown name is left for :func:`validate_strategy_names` to report — and
    only that name: the other kinds still get their declared defaults, so one unknown
    provider is one problem, not one per kind."""
    try:
        registry = registry or Registry.from_config(config)
    except PluginError:
        return config
    try:
        return registry.resolve(config, sources)
    except PluginError:
        try:
            return strategy_fill(config, registry, sources)
        except PluginError:
            return config


def validate_strategy_names(loaded: LoadedConfig, registry: Registry) -> None:
    """Fail when a strategy name in config (``[provider]``/``[estimator]``/``[pruner]``/
    ``[summarizer]``/``[store]`` ``name``, ``[store] sidecar_format``) is not registered; the
    message names the source, key, value and the available names."""
    problems = []
    for dotted, kind in STRATEGY_KEYS.items():
        section, _, name = dotted.partition(".")
        value = getattr(getattr(loaded.config, section), name)
        names = registry.names(KIND_BY_NAME[kind])
        if not value:  # left to the kind's default, and no plugin declares one
            problems.append(f"{loaded.sources.get(dotted, DEFAULT_SOURCE)}: {dotted} is empty "
                            f"and no registered {kind} declares itself the default (was it "
                            "disabled in [plugins] disabled?); name one: "
                            f"{', '.join(names) or '(none registered)'}")
        elif value not in names:
            available = ", ".join(names) or "(none registered)"
            problems.append(f"{loaded.sources.get(dotted, DEFAULT_SOURCE)}: {dotted} = "
                            f"{value!r} is not a registered {kind}; available: {available} "
                            "(`ctxfold plugins` lists them; install or enable the plugin)")
    if problems:
        raise ConfigError(_join(problems))
