"""Recognise a provider's context-overflow error and read its numbers (design §7.2).

Only HTTP 400/413/422 bodies are considered. The numbers come from JSON fields
(``context_length``/``max_context_length``, ``requested_tokens``, ``prompt_tokens``/
``input_tokens``, ``completion_tokens``/``output_tokens``, also under ``usage``) or from the
known message templates:

* "maximum context length is N tokens. However, you requested M tokens (P in the messages,
  C in the completion)" — DeepSeek and OpenAI Chat (OpenAI may add "F in the functions");
* "prompt is too long: P tokens > W maximum";
* "input length and `max_tokens` exceed context limit: P + C > W";
* OpenAI's ``code: context_length_exceeded`` (no numbers: window/prompt/completion are 0).

Numbers are trusted only if they are consistent (prompt + completion > window when all are
known; the requested total equals their sum). An inconsistent body is discarded (``None``),
because overflow recovery would otherwise clip ``max_tokens`` from a wrong window — unless the
provider said ``context_length_exceeded`` explicitly, in which case the overflow is kept
with its numbers zeroed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ctxfold.kernel.errors import ContextLimitError

OVERFLOW_STATUSES = frozenset({400, 413, 422})
OVERFLOW_CODES = frozenset({"context_length_exceeded", "context_window_exceeded"})

_N = r"([\d,]+)"
_MAX_CONTEXT = re.compile(
    rf"maximum context length is {_N} tokens?\.?\s*However,? you requested {_N} tokens?"
    rf"\s*\({_N} in the (?:messages|prompt)"
    rf"(?:,\s*{_N} in the functions)?,?\s*(?:and\s+)?{_N} in the completion\)",
    re.IGNORECASE,
)
_MAX_CONTEXT_RESULTED = re.compile(
    rf"maximum context length is {_N} tokens?\.?\s*However,? your messages resulted in "
    rf"{_N} tokens?",
    re.IGNORECASE,
)
_MAX_CONTEXT_ONLY = re.compile(rf"maximum context length is {_N} tokens?", re.IGNORECASE)
_PROMPT_TOO_LONG = re.compile(rf"prompt is too long:\s*{_N} tokens?\s*>\s*{_N}", re.IGNORECASE)
_INPUT_AND_MAX = re.compile(
    rf"input length and `?max_tokens`? exceed context limit:\s*{_N}\s*\+\s*{_N}\s*>\s*{_N}",
    re.IGNORECASE,
)
_WINDOW_KEYS = ("context_length", "max_context_length", "context_window")
_REQUESTED_KEYS = ("requested_tokens", "requested")
_PROMPT_KEYS = ("prompt_tokens", "input_tokens")
_COMPLETION_KEYS = ("completion_tokens", "output_tokens")


def parse_context_limit(status: int, body_text: str) -> ContextLimitError | None:
    """A :class:`ContextLimitError` if ``body_text`` (of an HTTP ``status`` response) reports a
    context overflow, else ``None``. Also used for in-stream error payloads (pass 400)."""
    if status not in OVERFLOW_STATUSES or not body_text:
        return None
    data = _load(body_text)
    err = _error_object(data)
    message = _str(err.get("message")) or _str(data.get("message"))
    code = (_str(err.get("code")) or _str(data.get("code"))).lower()
    explicit = code in OVERFLOW_CODES or _str(err.get("type")).lower() in OVERFLOW_CODES

    window, requested, prompt, completion, textual = _from_text(message or body_text)
    sources = [err, data, _mapping(err.get("usage")), _mapping(data.get("usage"))]
    window = window or _first(sources, _WINDOW_KEYS)
    requested = requested or _first(sources, _REQUESTED_KEYS)
    prompt = prompt or _first(sources, _PROMPT_KEYS)
    completion = completion or _first(sources, _COMPLETION_KEYS)

    said_overflow = explicit or textual or "context window" in message.lower()
    numbers_say = bool(window and prompt and prompt + completion > window)
    if not (said_overflow or numbers_say):
        return None
    if not _consistent(window, requested, prompt, completion):
        if not explicit:
            return None
        window = prompt = completion = 0
    return ContextLimitError(_describe(window, prompt, completion, message), window=window,
                             prompt=prompt, completion=completion, status=status)


def _from_text(text: str) -> tuple[int, int, int, int, bool]:
    """(window, requested, prompt, completion, matched a known template)."""
    if m := _MAX_CONTEXT.search(text):
        window, requested, prompt, functions, completion = (_int(g) for g in m.groups())
        return window, requested, prompt + functions, completion, True
    if m := _MAX_CONTEXT_RESULTED.search(text):
        return _int(m.group(1)), 0, _int(m.group(2)), 0, True
    if m := _PROMPT_TOO_LONG.search(text):
        return _int(m.group(2)), 0, _int(m.group(1)), 0, True
    if m := _INPUT_AND_MAX.search(text):
        return _int(m.group(3)), 0, _int(m.group(1)), _int(m.group(2)), True
    if m := _MAX_CONTEXT_ONLY.search(text):
        return _int(m.group(1)), 0, 0, 0, True
    return 0, 0, 0, 0, False


def _consistent(window: int, requested: int, prompt: int, completion: int) -> bool:
    if requested and (prompt or completion) and requested != prompt + completion:
        return False
    if window and requested and not prompt and not completion:
        return requested > window
    if window and (prompt or completion):
        return prompt + completion > window
    return True


def _describe(window: int, prompt: int, completion: int, message: str) -> str:
    if window and prompt:
        numbers = (f"the window is {window} tokens but the request needs {prompt} (prompt) "
                   f"+ {completion} (completion)")
    elif window:
        numbers = f"the window is {window} tokens"
    else:
        numbers = "the provider gave no token counts"
    said = f" (provider said: {message[:200]!r})" if message else ""
    return (f"context window exceeded: {numbers}{said}; compact the session "
            "(prepare(trigger='overflow') or `ctxfold compact`) or lower max_output_tokens")


def _load(text: str) -> Mapping[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, Mapping) else {}


def _error_object(data: Mapping[str, Any]) -> Mapping[str, Any]:
    err = data.get("error")
    if isinstance(err, Mapping):
        return err
    if isinstance(err, str):
        return {"message": err}
    return data


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _first(sources: list[Mapping[str, Any]], keys: tuple[str, ...]) -> int:
    for source in sources:
        for key in keys:
            value = source.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
            if isinstance(value, str) and value.isdigit():
                return int(value)
    return 0


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(text: str | None) -> int:
    return int(text.replace(",", "")) if text else 0
