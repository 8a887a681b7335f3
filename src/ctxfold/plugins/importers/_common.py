"""Helpers shared by the built-in importers: bounded reads for sniffing, strict JSON
loading with positioned errors, and provider-usage parsing."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ctxfold.importing import importer_error
from ctxfold.interop.chat import join_text_parts, message_from_openai
from ctxfold.kernel.errors import MessageError
from ctxfold.kernel.types import Message, Usage

#: Bytes read from each end of a file when sniffing; enough for every header we look for.
SNIFF_BYTES = 64 * 1024

_SUFFIXES = (".traj.json", ".traj", ".jsonl", ".json", ".xml")


def read_head(path: Path, size: int = SNIFF_BYTES) -> bytes:
    """The first ``size`` bytes of a regular file (empty for directories)."""
    if not path.is_file():
        return b""
    with path.open("rb") as handle:
        return handle.read(size)


def read_head_tail(path: Path, size: int = SNIFF_BYTES) -> bytes:
    """The first and last ``size`` bytes of a file, concatenated (the whole file if small).

    JSON trajectories often put their format tag at the very end (mini-swe-agent writes
    ``trajectory_format`` last), so sniffing looks at both ends without reading the middle.
    """
    if not path.is_file():
        return b""
    with path.open("rb") as handle:
        head = handle.read(size)
        total = handle.seek(0, 2)
        if total <= 2 * size:
            handle.seek(0)
            return handle.read()
        handle.seek(total - size)
        return head + handle.read(size)


def head_lines(head: bytes, limit: int = 5) -> list[Any]:
    """Up to ``limit`` complete, JSON-decodable lines from ``head`` (sniffing JSONL)."""
    lines = head.split(b"\n")
    if len(lines) > 1:
        lines = lines[:-1]  # the last piece may be cut off by the bounded read
    out: list[Any] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            return out
        if len(out) >= limit:
            break
    return out


def first_non_space(data: bytes) -> bytes:
    """The first non-whitespace byte of ``data`` (after a UTF-8 BOM), or empty."""
    stripped = data.removeprefix(b"\xef\xbb\xbf").lstrip()
    return stripped[:1]


def stem_of(path: Path) -> str:
    """File name without the transcript suffixes (``x.traj.json`` → ``x``)."""
    name = path.name
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def load_json(path: Path) -> Any:
    """Parse a whole JSON document; errors name the file, line/column and the reason."""
    try:
        with path.open("rb") as handle:
            return json.load(handle)
    except json.JSONDecodeError as exc:
        raise importer_error(
            path,
            f"line {exc.lineno} column {exc.colno}",
            f"invalid JSON: {exc.msg}",
            "the file is damaged or truncated; re-export it",
        ) from None
    except UnicodeDecodeError as exc:
        raise importer_error(
            path, f"byte {exc.start}", "not UTF-8 text", "re-export it as UTF-8 JSON"
        ) from None
    except OSError as exc:
        raise importer_error(path, "", f"cannot read: {exc.strerror}", "check the path") from None


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """Yield ``(line number, decoded object)`` for each non-blank line, one line in memory."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise importer_error(path, "", f"cannot read: {exc.strerror}", "check the path") from None
    with handle:
        for lineno, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                yield lineno, json.loads(raw)
            except ValueError as exc:
                raise importer_error(
                    path,
                    f"line {lineno}",
                    f"invalid JSON line: {exc}",
                    "the file is damaged or its last line was cut off; fix or remove the line",
                ) from None


def require(
    path: Path, container: Mapping[str, Any], key: str, kind: type | tuple[type, ...],
    position: str,
) -> Any:
    """``container[key]``, which must exist and be of ``kind``; otherwise an ImporterError."""
    if key not in container:
        raise importer_error(path, position, f"missing required field {key!r}")
    value = container[key]
    if not isinstance(value, kind):
        kinds = (kind,) if isinstance(kind, type) else kind
        expected = " or ".join(k.__name__ for k in kinds)
        raise importer_error(
            path, position, f"field {key!r} must be {expected}, got {type(value).__name__}"
        )
    return value


def require_object(path: Path, value: Any, position: str) -> Mapping[str, Any]:
    """``value`` if it is a JSON object; otherwise an ImporterError."""
    if not isinstance(value, Mapping):
        raise importer_error(
            path, position, f"expected a JSON object, got {type(value).__name__}"
        )
    return value


def dig(data: Any, *keys: str) -> Any:
    """``data[k1][k2]...`` or ``None`` when any level is missing or not an object."""
    for key in keys:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def openai_message(path: Path, data: Mapping[str, Any], position: str) -> Message:
    """:func:`message_from_openai` with errors turned into positioned ImporterErrors."""
    try:
        return message_from_openai(data, where=position, lossless=False)
    except MessageError as exc:
        reason = str(exc).removeprefix(position).removeprefix(": ").removeprefix(".")
        raise importer_error(path, position, reason) from None


def text_of(content: Any) -> str:
    """Join the text of a string or a list of content parts (non-text parts are skipped)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return join_text_parts(content)
    return str(content)


def as_int(value: Any) -> int:
    """``value`` if it is an int (not a bool), else 0 (tolerant usage parsing)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_from_openai(data: Any) -> Usage | None:
    """Provider usage from an OpenAI/LiteLLM ``usage`` object, ``None`` when absent.

    Cache hits come from DeepSeek's ``prompt_cache_hit_tokens`` or
    ``prompt_tokens_details.cached_tokens`` (or LiteLLM's ``cache_read_input_tokens``);
    misses from ``prompt_cache_miss_tokens``, else prompt minus hits when the provider
    reported a cache split at all.
    """
    if not isinstance(data, Mapping):
        return None
    prompt = as_int(data.get("prompt_tokens"))
    details = data.get("prompt_tokens_details")
    cached: Any = data.get("prompt_cache_hit_tokens")
    if cached is None and isinstance(details, Mapping):
        cached = details.get("cached_tokens")
    if cached is None:
        cached = data.get("cache_read_input_tokens")
    hit = as_int(cached)
    miss_raw = data.get("prompt_cache_miss_tokens")
    if miss_raw is not None:
        miss = as_int(miss_raw)
    else:
        miss = max(prompt - hit, 0) if cached is not None else 0
    completion_details = data.get("completion_tokens_details")
    reasoning = (
        as_int(completion_details.get("reasoning_tokens"))
        if isinstance(completion_details, Mapping)
        else 0
    )
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=as_int(data.get("completion_tokens")),
        cache_hit_tokens=hit,
        cache_miss_tokens=miss,
        reasoning_tokens=reasoning,
    )


def search(pattern: bytes, data: bytes) -> bool:
    """``re.search`` as a bool (sniffing helper)."""
    return re.search(pattern, data) is not None
