"""Reading the arguments a model passed to a capability (they are model-controlled input)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ctxfold.kernel.errors import ToolResultError

#: Larger integers are refused: no offset or limit can mean more, and a number of thousands
#: of digits would cost time (or, as a string, raise) before any range check.
MAX_INT = 2**63 - 1


def int_arg(arguments: Mapping[str, Any], key: str, default: int | None) -> int | None:
    """An integer argument; models often send numbers as strings (exact integers only)."""
    value = arguments.get(key, default)
    if value is None:
        return default
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,19}", value.strip()):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > MAX_INT:
            raise ToolResultError(f"argument {key} is out of range (at most {MAX_INT})")
        return value
    raise ToolResultError(f"argument {key}={value!r:.40} must be an integer")
