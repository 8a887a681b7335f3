"""Strict typing of config values: wrong types, unknown keys and out-of-range values become
one readable problem line each (file/env/flag, key, value, what is allowed)."""

from __future__ import annotations

import functools
import re
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import cattrs

from ctxfold.config.layers import Layer
from ctxfold.kernel.codec import strict_primitives
from ctxfold.kernel.config import Config
from ctxfold.kernel.errors import ConfigError
from ctxfold.kernel.registry import STRATEGY_KEYS
from ctxfold.secrets import show_value


def _section_classes() -> dict[str, type]:
    attrs.resolve_types(Config)
    out: dict[str, type] = {}
    for field in attrs.fields(Config):
        cls = typing.cast(type, field.type)
        attrs.resolve_types(cls)
        out[field.name] = cls
    return out


#: ``{"agent": AgentConfig, ...}`` in schema order.
SECTIONS: dict[str, type] = _section_classes()



class WrongType(ConfigError, TypeError):
    """A value does not have the type of its field (the loader names the key)."""

    def __init__(self, value: Any) -> None:
        super().__init__(f"wrong type {type(value).__name__}")
        self.value = value


def type_name(tp: Any) -> str:
    names = {float: "a number", int: "an integer", str: "a string", bool: "true or false"}
    if tp in names:
        return names[tp]
    if typing.get_origin(tp) is tuple:
        return "a list of strings"
    if _is_optional_bool(tp):
        return "true or false"
    return getattr(tp, "__name__", str(tp))


def _is_optional_bool(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and set(
        typing.get_args(tp)
    ) == {bool, type(None)}


def _check(ok: Callable[[Any], bool], cast: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
    def hook(value: Any, _type: Any) -> Any:
        if not ok(value):
            raise WrongType(value)
        return cast(value)

    return hook


@functools.cache
def strict_converter() -> cattrs.Converter:
    """The config converter: the kernel's strict primitive rules, unknown keys forbidden,
    and every error a :class:`WrongType` the loader turns into a line naming the key."""
    from cattrs.gen import make_dict_structure_fn

    conv = strict_primitives(cattrs.Converter(forbid_extra_keys=True),
                             lambda _kind, value: WrongType(value))
    conv.register_structure_hook_func(
        _is_optional_bool, _check(lambda v: v is None or isinstance(v, bool), lambda v: v)
    )
    conv.register_structure_hook_func(
        lambda tp: tp == tuple[str, ...],
        _check(lambda v: isinstance(v, list | tuple) and all(isinstance(s, str) for s in v),
               tuple),
    )
    for cls in (*SECTIONS.values(), Config):
        fn: Callable[[Any, Any], Any] = make_dict_structure_fn(
            cls, conv, _cattrs_forbid_extra_keys=True
        )
        conv.register_structure_hook(cls, _table_hook(cls, fn))
    return conv


def _table_hook(cls: type, fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def hook(value: Any, tp: Any) -> Any:
        from cattrs.errors import ClassValidationError

        if not isinstance(value, Mapping):
            raise WrongType(value)
        try:
            return fn(value, tp)
        except ClassValidationError as exc:
            # cattrs reports an attrs validator's ValueError (raised by __init__) without the
            # attribute it belongs to; attribute it so the message names the key.
            loose = [e for e in exc.exceptions
                     if type(e) is ValueError and not getattr(e, "__notes__", None)]
            kept = [e for e in exc.exceptions if not any(e is x for x in loose)]
            if not loose:
                raise
            found = _field_errors(cls, value)
            raise ClassValidationError(exc.message, [*kept, *(found or loose)], cls) from None

    return hook


def _field_errors(cls: type, value: Mapping[str, Any]) -> list[Exception]:
    """Run each field's validator alone; errors carry the note naming their attribute."""
    from cattrs.errors import AttributeValidationNote

    errors: list[Exception] = []
    for field in attrs.fields(cls):
        if field.name in value and field.validator is not None:
            try:
                field.validator(None, field, value[field.name])
            except ValueError as err:
                err.add_note(AttributeValidationNote(
                    f"Structuring class {cls.__qualname__} @ attribute {field.name}",
                    field.name, field.type))
                errors.append(err)
    return errors


def _format_exception(exc: BaseException, _type: Any) -> str:
    from cattrs.errors import ForbiddenExtraKeysError

    # Encoded for problems(), which adds key, value and allowed values.
    if isinstance(exc, ForbiddenExtraKeysError):
        return "extra:" + ",".join(sorted(exc.extra_fields))
    if isinstance(exc, WrongType):
        return "type:"
    return "value:" + str(exc)


def allowed_values(key: str) -> str:
    """Human description of the valid values of dotted ``key`` (for messages and docs)."""
    section, _, name = key.partition(".")
    field = attrs.fields_dict(SECTIONS[section])[name]
    if "allowed" in field.metadata:
        return str(field.metadata["allowed"])
    if key in STRATEGY_KEYS:
        return f"a registered {STRATEGY_KEYS[key]} name (see `ctxfold plugins`)"
    return type_name(field.type)


def lookup(data: Mapping[str, Any], path: list[str]) -> Any:
    node: Any = data
    for part in path:
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def problems(layer: Layer, exc: Exception) -> list[str]:
    from cattrs import transform_error

    lines = []
    for text in transform_error(exc, format_exception=_format_exception):
        code, _, where = text.rpartition(" @ $")
        path = [p for p in where.split(".") if p]
        dotted = ".".join(path)
        kind, _, detail = code.partition(":")
        if kind == "extra":
            for name in detail.split(","):
                lines.append(unknown_key(layer, path, name))
        elif kind == "type" and len(path) == 1:
            lines.append(f"{layer.origin(dotted)}: [{dotted}] must be a table, got "
                         f"{show_value(dotted, lookup(layer.data, path))}")
        elif kind == "type":
            value = lookup(layer.data, path)
            lines.append(f"{layer.origin(dotted)}: {dotted} = {show_value(dotted, value)} has the "
                         f"wrong type ({type(value).__name__}); allowed: {allowed_values(dotted)}")
        else:
            value = lookup(layer.data, path)
            name = path[-1] if path else ""
            if name and detail.startswith(f"{name} = "):
                message = f"{path[0]}.{detail}"  # validator text already shows key and value
            else:
                message = f"{dotted} = {show_value(dotted, value)}: {detail}"
            lines.append(f"{layer.origin(dotted)}: {message}")
    return lines


def all_problems(layer: Layer, ignored: frozenset[str] = frozenset()) -> list[str]:
    """Every problem of ``layer`` against the schema (``ignored`` dotted keys left out), in
    file order. cattrs reports the unknown keys of a table instead of the problems of its
    known ones; those keys are set aside and the rest checked again, so an unknown key never
    hides a bad value beside it."""
    data = _without(layer.data, ignored)
    found: list[str] = []
    for _ in range(len(SECTIONS) + 2):  # each round sets aside the unknown keys it found
        try:
            strict_converter().structure(data, Config)
        except Exception as exc:  # cattrs raises ExceptionGroups, attrs ValueErrors
            more = problems(layer, exc) or [f"{layer.source}: {exc}"]
            unknown = _unknown_keys(exc)
            found += [p for p in more if p not in found]
            if not unknown:
                break
            data = _without(data, unknown)
            continue
        break
    return sorted(found, key=_line_of)  # in file order


def _line_of(problem: str) -> int:
    match = re.search(r" line (\d+): ", problem)
    return int(match.group(1)) if match else 0


def _without(data: dict[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for section, table in data.items():
        if section in keys:
            continue
        if isinstance(table, Mapping):
            table = {k: v for k, v in table.items() if f"{section}.{k}" not in keys}
        out[section] = table
    return out


def _unknown_keys(exc: BaseException) -> frozenset[str]:
    """The dotted keys (and tables) cattrs refused as unknown in ``exc``."""
    from cattrs.errors import ForbiddenExtraKeysError

    keys: set[str] = set()
    stack: list[tuple[BaseException, str]] = [(exc, "")]
    while stack:
        err, path = stack.pop()
        if isinstance(err, ForbiddenExtraKeysError):
            keys.update(f"{path}{name}" if path else name for name in err.extra_fields)
        for sub in getattr(err, "exceptions", ()):
            notes = [n for n in getattr(sub, "__notes__", ()) if hasattr(n, "name")]
            name = getattr(notes[0], "name", "") if notes else ""
            stack.append((sub, f"{path}{name}." if name and not path else path))
    return frozenset(keys)


def unknown_key(layer: Layer, path: list[str], name: str) -> str:
    dotted = ".".join([*path, name])
    if not path:
        return (f"{layer.origin(dotted)}: unknown table [{name}]; "
                f"allowed tables: {', '.join(SECTIONS)}")
    section = path[0]
    value = lookup(layer.data, [*path, name])
    shown = "" if isinstance(value, Mapping) else f" = {show_value(dotted, value)}"
    allowed = ", ".join(f.name for f in attrs.fields(SECTIONS[section])
                        if f.name not in layer.legacy_names)
    return (f"{layer.origin(dotted)}: unknown key {dotted}{shown}; "
            f"allowed keys in [{section}]: {allowed}")


def parse_text(text: str, key: str) -> Any:
    """Parse an environment/flag string for dotted ``key`` by the field's type."""
    section, _, name = key.partition(".")
    tp = attrs.fields_dict(SECTIONS[section])[name].type
    low = text.strip().lower()
    if tp is str:
        return text
    if tp is bool or _is_optional_bool(tp):
        if _is_optional_bool(tp) and low == "":
            return None
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise WrongType(text)
    if typing.get_origin(tp) is tuple:
        if text.lstrip().startswith("["):
            try:
                value = tomllib.loads(f"v = {text}")["v"]
            except tomllib.TOMLDecodeError:
                raise WrongType(text) from None
            return value
        return [part.strip() for part in text.split(",") if part.strip()]
    try:
        return int(text, 10) if tp is int else float(text)
    except ValueError:
        raise WrongType(text) from None
