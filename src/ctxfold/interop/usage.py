"""Provider usage in any of the shapes an agent holds it, mapped to :class:`Usage`.

Chat completions (``prompt_tokens``, DeepSeek's ``prompt_cache_hit_tokens``/
``prompt_cache_miss_tokens``, ``prompt_tokens_details.cached_tokens``), Responses
(``input_tokens``, ``input_tokens_details.cached_tokens``) and Anthropic Messages
(``input_tokens`` with ``cache_creation_input_tokens``/``cache_read_input_tokens``) usage,
as dicts or as the SDKs' objects (``CompletionUsage``, ``ResponseUsage``, Anthropic's
``Usage``: anything with ``model_dump``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxfold.kernel.types import Usage


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _get(data: Mapping[str, Any], outer: str, inner: str) -> Any:
    value = data.get(outer)
    return value.get(inner) if isinstance(value, Mapping) else None


def chat_usage(data: Any) -> Usage:
    """Map a chat-completions ``usage`` object. DeepSeek's ``prompt_cache_hit_tokens`` /
    ``prompt_cache_miss_tokens`` win; its ``prompt_tokens_details.cached_tokens`` duplicates
    the hit count and is not added again. Otherwise (MiMo, OpenAI) hits come from
    ``prompt_tokens_details.cached_tokens`` (which may be null) and misses are the rest."""
    if not isinstance(data, Mapping):
        return Usage()
    prompt = _int(data.get("prompt_tokens"))
    completion = _int(data.get("completion_tokens"))
    details = data.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    if "prompt_cache_hit_tokens" in data or "prompt_cache_miss_tokens" in data:
        hit = _int(data.get("prompt_cache_hit_tokens"))
        miss = _int(data.get("prompt_cache_miss_tokens"))
    else:
        hit, miss = cached, max(prompt - cached, 0)
    out_details = data.get("completion_tokens_details")
    reasoning = _int(out_details.get("reasoning_tokens")) if isinstance(out_details,
                                                                        Mapping) else 0
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cache_hit_tokens=hit,
                 cache_miss_tokens=miss, reasoning_tokens=reasoning)


def responses_usage(data: Any) -> Usage:
    """Map a Responses ``usage`` object."""
    if not isinstance(data, Mapping):
        return Usage()
    prompt = _int(data.get("input_tokens"))
    cached = _int(_get(data, "input_tokens_details", "cached_tokens"))
    return Usage(prompt_tokens=prompt, completion_tokens=_int(data.get("output_tokens")),
                 cache_hit_tokens=cached, cache_miss_tokens=max(prompt - cached, 0),
                 reasoning_tokens=_int(_get(data, "output_tokens_details", "reasoning_tokens")))


def anthropic_usage(data: Any) -> Usage:
    """Map an Anthropic Messages ``usage`` object: ``input_tokens`` excludes cached tokens on
    this wire, so the prompt is it plus ``cache_creation_input_tokens`` (written to the
    cache: misses, also counted as writes) plus ``cache_read_input_tokens`` (hits)
    (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching). ``data``: a dict
    or the SDK's object."""
    data = as_mapping(data)
    if data is None:
        return Usage()
    fresh = _int(data.get("input_tokens"))
    written = _int(data.get("cache_creation_input_tokens"))
    read = _int(data.get("cache_read_input_tokens"))
    return Usage(prompt_tokens=fresh + written + read,
                 completion_tokens=_int(data.get("output_tokens")),
                 cache_hit_tokens=read, cache_miss_tokens=fresh + written,
                 cache_write_tokens=written)


def as_mapping(value: Any) -> Mapping[str, Any] | None:
    """A dict for an SDK object (``model_dump``), or the mapping itself; else ``None``. Null
    fields are left out, except a ``content: null`` the object was given (an assistant turn
    that only calls tools), which is part of the message."""
    if isinstance(value, Mapping):
        return value
    dump = getattr(value, "model_dump", None)
    if not callable(dump):
        return None
    dumped = dump(exclude_none=True)
    if not isinstance(dumped, Mapping):
        return None
    fields_set = getattr(value, "model_fields_set", ())
    if "content" in fields_set and getattr(value, "content", "") is None:
        dumped = {**dumped, "content": None}
    return dumped


def usage_from(value: Any) -> tuple[Usage | None, str]:
    """``(usage, "")`` for a recognised usage object or dict, else ``(None, why)``."""
    if isinstance(value, Usage):
        return value, ""
    data = as_mapping(value)
    if data is None:
        return None, ("usage must be a ctxfold Usage, a dict or an OpenAI/Anthropic SDK usage "
                      f"object, got {type(value).__name__}")
    if "cache_creation_input_tokens" in data or "cache_read_input_tokens" in data:
        return anthropic_usage(data), ""
    if "input_tokens" in data:
        return responses_usage(data), ""
    if "prompt_tokens" in data:
        return chat_usage(data), ""
    return None, ("usage has neither prompt_tokens (chat completions) nor input_tokens "
                  f"(Responses); keys: {', '.join(sorted(data)) or '(none)'}")
