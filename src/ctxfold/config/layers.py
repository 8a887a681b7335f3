"""One layer of configuration: where its values came from, line by line.

The load pipeline (:mod:`ctxfold.config.load`) stacks layers — user file, project file,
environment, flags — and every error or ``config show`` row names the layer (and the line in
a file) a value came from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs


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
