"""All (un)structuring of ctxfold's value objects, in one place.

:data:`converter` is the one strict ``cattrs`` converter: it turns value objects into
JSON-ready dicts and back (transcript lines, sidecar bodies). Fields equal to their default
are omitted on the way out, so files stay small and adding a field later does not change
existing bytes. Structuring is strict about primitive types: a transcript line with
``"local_only": "no"`` is corrupt, not ``True``. :func:`check_message` applies the same rules
to a message before it is appended, so nothing enters a transcript that could not be read
back. (OpenAI-format interop is :mod:`ctxfold.interop`.)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from ctxfold.kernel.ledger import LedgerEntry
from ctxfold.kernel.state import (
    Action,
    CacheState,
    Projection,
    Receipt,
    SidecarState,
    TelemetryRecord,
)
from ctxfold.kernel.types import Message, ToolCall, ToolSchema, Usage


def _type_error(kind: type, value: Any) -> Exception:
    return TypeError(f"expected {kind.__name__}, got {type(value).__name__} {value!r:.40}")


def strict_primitives(
    conv: cattrs.Converter, error: Callable[[type, Any], Exception] = _type_error
) -> cattrs.Converter:
    """Register the strict primitive rules on ``conv``: a ``str``, ``bool`` or ``int`` field
    takes exactly that type (``bool`` is never an ``int``), a ``float`` field any number but a
    ``bool``. ``error(kind, value)`` builds the exception (the config loader's names the
    key). Every converter in ctxfold structures through these rules."""

    def exact(kind: type) -> Callable[[Any, Any], Any]:
        def structure(value: Any, _type: Any) -> Any:
            if type(value) is not kind:
                raise error(kind, value)
            return value

        return structure

    def number(value: Any, _type: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise error(float, value)
        return float(value)

    for kind in (str, bool, int):
        conv.register_structure_hook(kind, exact(kind))
    conv.register_structure_hook(float, number)
    return conv


def _make_converter() -> cattrs.Converter:
    # Strict primitives: a transcript line with "local_only": "no" is corrupt, not True.
    conv = strict_primitives(cattrs.Converter(forbid_extra_keys=False))
    conv.register_structure_hook(CacheState, lambda v, _t: CacheState.coerce(v))
    conv.register_structure_hook(Action, lambda v, _t: Action(v))
    # Generated after the primitive and enum hooks, so the generated code uses them.
    for cls in (
        Message,
        ToolCall,
        Usage,
        Projection,
        Receipt,
        LedgerEntry,
        TelemetryRecord,
        SidecarState,
        ToolSchema,
    ):
        conv.register_unstructure_hook(
            cls, make_dict_unstructure_fn(cls, conv, _cattrs_omit_if_default=True)
        )
        conv.register_structure_hook(cls, make_dict_structure_fn(cls, conv))
    return conv


#: The converter for every ctxfold value object.
converter = _make_converter()


def message_to_dict(message: Message) -> dict[str, Any]:
    """Unstructure a message for a transcript line (defaults omitted)."""
    data: dict[str, Any] = converter.unstructure(message)
    return data


_ROLES = frozenset({"system", "user", "assistant", "tool"})
_LINE_TEXT = frozenset({"content", "raw_content", "tool_call_id", "name", "reasoning_content",
                        "created_at", "id"})
_CALL_KEYS = frozenset({"id", "name", "arguments"})


def _plain_message(data: Mapping[str, Any]) -> Message | None:
    """The common transcript line (role, texts, origin, plain tool calls) built directly —
    ~5x faster than the converter when a 50,000-message session is opened; ``None`` sends
    anything else (other fields, other types, bad values) through the strict converter."""
    if data.get("role") not in _ROLES:
        return None
    fields: dict[str, Any] = {}
    for key, value in data.items():
        if key in _LINE_TEXT:
            if type(value) is not str:
                return None
        elif key == "tool_calls":
            if type(value) is not list or not all(
                    type(c) is dict and c.keys() <= _CALL_KEYS and "id" in c and "name" in c
                    and all(type(v) is str for v in c.values()) for c in value):
                return None
            value = tuple(ToolCall(**c) for c in value)
        elif key == "origin":
            if value not in ("user", "host"):
                return None
        elif key != "role":
            return None
        fields[key] = value
    return Message(**fields)


def message_from_dict(data: Mapping[str, Any]) -> Message:
    """Structure a transcript line into a message; raises ``cattrs`` errors on bad data."""
    plain = _plain_message(data)
    return plain if plain is not None else converter.structure(dict(data), Message)


def dumps_message(message: Message) -> str:
    """One compact JSON line (no newline) for ``message``; non-ASCII kept as UTF-8."""
    return json.dumps(message_to_dict(message), ensure_ascii=False, separators=(",", ":"))


