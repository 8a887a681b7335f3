"""Every mapping from what went wrong on the wire to a typed :class:`~ctxfold.ProviderError`.

One place for all of them: an httpx exception while connecting or while reading a body, an
HTTP error status with its body, an error object inside a 200 response or a stream, a body
that is not the provider's protocol. Every error carries the HTTP status, the provider's
request id and the start of the body, and every text is passed through
:func:`ctxfold.secrets.redact_text` (the key in use, key-like tokens, URL credentials).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ctxfold.kernel.errors import (
    AuthenticationError,
    ContextLimitError,
    ProviderConnectionError,
    ProviderError,
    ProviderRequestError,
    ProviderResponseError,
    ProviderTimeoutError,
    RateLimitError,
    ServerError,
)
from ctxfold.secrets import redact_text
from ctxfold.transport.overflow import parse_context_limit
from ctxfold.transport.retry import RETRYABLE_STATUSES

#: How much of an error body is read, and how much of it an error keeps.
ERROR_BODY_LIMIT = 64 * 1024
ERROR_BODY_KEPT = 2048

OverflowParser = Callable[[int, str], ContextLimitError | None]


class ResponseDropped(ProviderConnectionError):
    """The connection dropped, or a stream ended early, after the response had started (not a
    failure to connect, which the HTTP layer retries itself). :class:`~ctxfold.transport.
    provider.HttpProvider` sends the request again when no output had arrived yet."""


def error_detail(text: str) -> str:
    """The provider's error message (``error.message`` / ``message``), trimmed, quoted."""
    message = ""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, Mapping):
        err = data.get("error", data)
        if isinstance(err, Mapping):
            message = str(err.get("message") or err.get("code") or "")
        elif isinstance(err, str):
            message = err
    if not message:
        message = " ".join(text.split())
    message = message or "(empty body)"
    return repr(message[:300] + ("…" if len(message) > 300 else ""))


def send_error(
    provider: str, exc: Exception, url: str, attempts: int, key: str | None, *, timeout: bool
) -> ProviderError:
    """The error for an httpx exception raised while sending a request (no response);
    ``timeout`` when it was a timeout (the client knows httpx's exception classes)."""
    if timeout:
        return ProviderTimeoutError(
            f"{provider}: POST {redact_text(url)} timed out ({type(exc).__name__}) after "
            f"{attempts} attempt(s); check the network or retry later")
    return ProviderConnectionError(
        f"{provider}: could not reach POST {redact_text(url)} ({type(exc).__name__}: "
        f"{redact_text(str(exc), key)}) after {attempts} attempt(s); "
        "check [provider] base_url and the network")


def read_error(
    provider: str, exc: Exception, url: str, idle_timeout: float, key: str | None,
    request_id: str = "", *, kind: str,
) -> ProviderError:
    """The error for an exception raised while reading a response body or an event stream;
    ``kind`` is ``sse`` (not an event stream), ``timeout`` or ``dropped``."""
    where = f"{provider}: reading the response from {redact_text(url)}"
    if kind == "sse":
        return ProviderResponseError(
            f"{provider}: expected an event stream from {redact_text(url)}: {exc}; check "
            "[provider] base_url and name", request_id=request_id)
    if kind == "timeout":
        return ProviderTimeoutError(
            f"{where}: no data for {idle_timeout:g}s (idle timeout); retry later or raise "
            "the idle timeout", request_id=request_id)
    return ResponseDropped(
        f"{where}: connection dropped ({type(exc).__name__}: {redact_text(str(exc), key)}); "
        "retry the request", request_id=request_id)


def status_error(
    *,
    provider: str,
    status: int,
    text: str,
    url: str,
    attempts: int,
    request_id: str,
    key: str | None,
    api_key_env: str,
    base_url: str,
    parse_overflow: OverflowParser | None = None,
) -> tuple[ProviderError, bool]:
    """``(error, retryable)`` for an HTTP error ``status`` whose body is ``text``."""
    text = redact_text(text, key)  # before anything is cut: a key cut in two is no match
    body = text[:ERROR_BODY_KEPT]
    detail = error_detail(text)
    where = f"{provider}: POST {redact_text(url)} returned HTTP {status}" + (
        f" (request id {request_id})" if request_id else "")
    tries = f" after {attempts} attempt(s)"
    meta: dict[str, Any] = {"status": status, "request_id": request_id, "body": body}
    if status in (401, 403):
        return AuthenticationError(
            f"{where}: {detail}; check that ${api_key_env} holds a valid key for "
            f"{redact_text(base_url)} (keys of different plans/regions are not "
            "interchangeable)", **meta), False
    overflow = (parse_overflow or parse_context_limit)(status, text)
    if overflow is not None:
        return ContextLimitError(
            f"{where}: {redact_text(str(overflow), key)}", window=overflow.window,
            prompt=overflow.prompt, completion=overflow.completion, **meta), False
    if status == 429:
        return RateLimitError(
            f"{where}{tries}: {detail}; rate or concurrency limit reached, wait and retry "
            "or lower parallelism", **meta), True
    if status >= 500:
        return ServerError(
            f"{where}{tries}: {detail}; the provider is failing or overloaded, retry later",
            **meta), True
    if status == 408:
        return ProviderTimeoutError(
            f"{where}{tries}: {detail}; the server timed out, retry later", **meta), True
    return ProviderRequestError(
        f"{where}{tries if status == 409 else ''}: {detail}; the provider rejected the "
        "request, check [provider] model and the request settings",
        **meta), status in RETRYABLE_STATUSES


def wait_refused(error: ProviderError, wait: float, cap: float) -> ProviderError:
    """``error`` (same type) for a server that asked to wait ``wait`` s, more than the ``cap``
    ctxfold waits in-process: not retried, and the message says when to try again."""
    refused = type(error)(
        f"{error}; the server asked to wait {wait:.0f}s before retrying (Retry-After), longer "
        f"than the {cap:g}s ctxfold waits, so the request was not retried: send it again after "
        "that wait", status=error.status, request_id=error.request_id, body=error.body)
    refused.retry_after = wait
    return refused


def error_from_payload(
    provider: str, payload: Any, where: str, parse_overflow: OverflowParser | None = None
) -> ProviderError:
    """The typed error for an error object reported inside a 200 response or stream
    (OpenAI ``error`` event, ``response.failed``, MiMo's in-stream ``{"error": ...}``,
    Anthropic's ``error`` event ``{"type": "error", "error": {"type": "overloaded_error",
    ...}}``: its ``api_error`` and ``overloaded_error`` are server failures,
    https://docs.anthropic.com/en/api/errors)."""
    text = json.dumps(payload, ensure_ascii=False)
    overflow = (parse_overflow or parse_context_limit)(400, text)
    body = redact_text(text)[:ERROR_BODY_KEPT]
    if overflow is not None:
        return ContextLimitError(f"{provider}: {where}: {overflow}", window=overflow.window,
                                 prompt=overflow.prompt, completion=overflow.completion,
                                 body=body)
    err = payload.get("error", payload) if isinstance(payload, Mapping) else payload
    err = err if isinstance(err, Mapping) else {"message": str(err)}
    code = " ".join(str(err.get(k) or "") for k in ("code", "type")).lower()
    said = redact_text(str(err.get("message") or code or text))[:300]
    msg = f"{provider}: {where}: {said!r}"
    if "rate" in code or "quota" in code:
        return RateLimitError(msg + "; rate limit reached, wait and retry", status=429, body=body)
    if any(w in code for w in ("auth", "key", "permission")):
        return AuthenticationError(msg + "; check the API key", status=401, body=body)
    if any(w in code for w in ("server", "overload", "internal", "unavailable", "api_error")):
        return ServerError(msg + "; the provider failed, retry later", body=body)
    return ProviderRequestError(msg + "; the provider rejected the request, check [provider] "
                                "model and the request settings", body=body)


def not_json(provider: str, url: str, raw: bytes, status: int, key: str | None,
             request_id: str = "") -> ProviderResponseError:
    """The error for a non-streaming answer whose body is not JSON."""
    start = redact_text(raw[:ERROR_BODY_KEPT].decode("utf-8", "replace"), key)[:80]
    return ProviderResponseError(
        f"{provider}: {redact_text(url)} returned a body that is not JSON ({len(raw)} bytes, "
        f"starts {start!r}); check [provider] base_url points at the API root",
        status=status, request_id=request_id, body=start)


def json_body(provider: str, url: str, raw: bytes, status: int, key: str | None,
              request_id: str = "") -> Any:
    """A non-streaming answer's decoded body, or :func:`not_json` (raised with no
    ``__context__``: the decoder's error holds the whole unmasked body)."""
    try:
        return json.loads(raw)
    except ValueError:
        pass
    raise not_json(provider, url, raw, status, key, request_id)


def stream_cut(provider: str, what: str) -> ProviderConnectionError:
    """The error for a stream that ended before its terminal event."""
    return ResponseDropped(
        f"{provider}: the response stream ended before {what}; the connection was dropped or "
        "the server gave up — the partial output is on exc.partial_message; retry the request"
    )


def bad_payload(provider: str, where: str, data: str) -> ProviderResponseError:
    """The error for an event or body that cannot be parsed."""
    masked = redact_text(data[:ERROR_BODY_KEPT])
    excerpt = masked[:120] + ("…" if len(masked) > 120 else "")
    return ProviderResponseError(
        f"{provider}: could not parse {where}: {excerpt!r}; the endpoint does not speak the "
        f"{provider} protocol — check [provider] name and base_url", body=excerpt
    )


def load_json(provider: str, where: str, data: str) -> Any:
    """``json.loads`` that raises :func:`bad_payload` instead of ValueError (with no
    ``__context__``: the decoder's error holds the whole unmasked text)."""
    try:
        return json.loads(data)
    except ValueError:
        pass
    raise bad_payload(provider, where, data)


def stream_event(provider: str, event: Any) -> tuple[str, Mapping[str, Any]] | None:
    """One event of a stream whose events are typed JSON objects (OpenAI Responses, Anthropic
    Messages): its type — the object's ``type``, else the SSE event name — and the object;
    ``None`` for an event with no data. An ``error`` event raises the provider's typed error,
    anything but a JSON object :func:`bad_payload`."""
    data = event.data.strip()
    if not data:
        return None
    payload = load_json(provider, "a stream event", data)
    if not isinstance(payload, Mapping):
        raise bad_payload(provider, "a stream event", data)
    kind = payload.get("type") or event.event
    if kind == "error":
        raise error_from_payload(provider, payload, "the stream reported an error")
    return str(kind), payload
