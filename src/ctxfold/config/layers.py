"""One layer of configuration (where its values came from, line by line), and where the
user and project files are.

The load pipeline (:mod:`ctxfold.config.load`) stacks layers — user file, project file,
environment, flags — and every error or ``config show`` row names the layer (and the line in
a file) a value came from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ctxfold.kernel.errors import ConfigError

PROJECT_FILE_NAME = "ctxfold.toml"
USER_FILE_NAME = "config.toml"
CONFIG_HOME_ENV = "CTXFOLD_CONFIG_HOME"


@attrs.define
class Layer:
    """One source of settings: its raw data and where each key came from."""

    source: str  # "user file /p", "env", "flags"
    data: dict[str, Any]
    origins: dict[str, str] = attrs.Factory(dict)  # dotted key -> "env CTXFOLD_X" / "flag --x"
    lines: dict[str, int] = attrs.Factory(dict)  # dotted key -> line in the file
    legacy_names: frozenset[str] = frozenset()
    legacy_found: list[str] = attrs.Factory(list)

    def origin(self, dotted: str) -> str:
        if dotted in self.origins:
            return self.origins[dotted]
        line = self.lines.get(dotted) or min(
            (n for k, n in self.lines.items() if k.startswith(dotted + ".")), default=0
        )
        return f"{self.source} line {line}" if line else self.source

    def dotted_keys(self) -> Iterable[str]:
        for section, table in self.data.items():
            if isinstance(table, Mapping):
                for name in table:
                    yield f"{section}.{name}"


def user_file(user_config_path: Path | None, env: Mapping[str, str]) -> Path:
    """The user file: the given path, else ``$CTXFOLD_CONFIG_HOME/config.toml``, else the
    platform's user config directory."""
    if user_config_path is not None:
        return Path(user_config_path)
    if env.get(CONFIG_HOME_ENV):
        return Path(env[CONFIG_HOME_ENV]) / USER_FILE_NAME
    import platformdirs

    return Path(platformdirs.user_config_dir("ctxfold")) / USER_FILE_NAME


def project_file(config_path: str | Path | None, cwd: Path) -> Path | None:
    """The project file: ``--config`` (which must exist), else ``./ctxfold.toml`` if any."""
    if config_path is None:
        candidate = cwd / PROJECT_FILE_NAME
        return candidate if candidate.is_file() else None
    path = Path(config_path)
    path = path if path.is_absolute() else cwd / path
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise ConfigError(f"--config {path} {what}; check the path, or omit --config to use "
                          f"./{PROJECT_FILE_NAME}")
    return path
