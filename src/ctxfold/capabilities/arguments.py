"""Reading the arguments a model passed to a capability (they are model-controlled input)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ctxfold.kernel.errors import ToolResultError


def int_arg(arguments: Mapping[str, Any], key: str, default: int | None) -> int | None:
    """An integer argument; models often send numbers as strings (exact integers only)."""
    value = arguments.get(key, default)
    if value is None:
        return default
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ToolResultError(f"argument {key}={value!r} must be an integer")
