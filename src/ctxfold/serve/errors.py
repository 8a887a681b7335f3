"""The errors the proxy answers with: an OpenAI-shaped error response on the OpenAI routes,
an Anthropic-shaped one on ``/v1/messages`` (:func:`in_wire`)."""

from __future__ import annotations

import json
import math
from typing import Any

from ctxfold.kernel.errors import (
    AuthenticationError,
    CompactionRequiredError,
    ContextLimitError,
    CtxfoldError,
    MessageError,
    ProviderConnectionError,
    ProviderError,
    ProviderRequestError,
    ProviderResponseError,
    ProviderTimeoutError,
    RateLimitError,
    ServerError,
    SessionError,
)
from ctxfold.secrets import redact_text


class ServeError(CtxfoldError):
    """A request the proxy refuses: ``status`` is the HTTP status sent back, ``kind`` the
    OpenAI error ``type`` and ``code`` its ``code``. The message is masked of secrets."""

    def __init__(self, message: str, *, status: int = 400,
                 kind: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None) -> None:
        super().__init__(redact_text(message))
        self.status = status
        self.kind = kind
        self.code = code
        self.param = param

    def body(self) -> dict[str, Any]:
        """The OpenAI error envelope of this error."""
        return error_envelope(str(self), kind=self.kind, code=self.code, param=self.param)


class SessionBusyError(ServeError):
    """Another request of the same session held it longer than the bounded wait (409)."""

    def __init__(self, session_id: str, waited: float) -> None:
        super().__init__(
            f"session {session_id!r} is busy with another request and stayed busy for "
            f"{waited:g}s (requests of one session are serialized); retry when the other "
            "request has finished, or raise --lock-wait",
            status=409, kind="conflict", code="session_busy")


def error_envelope(message: str, *, kind: str = "invalid_request_error",
                   code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}`` (the OpenAI shape)."""
    return {"error": {"message": redact_text(message), "type": kind, "param": param,
                      "code": code}}


#: HTTP status, OpenAI error type and what the client is told, per failure that carries
#: no HTTP error status of its own (the first class that matches wins). The text names what
#: failed, never the upstream's address or the operator's settings (the log has those).
_FALLBACK: tuple[tuple[type[BaseException], int, str, str], ...] = (
    (AuthenticationError, 401, "authentication_error", "the upstream provider refused the key"),
    (RateLimitError, 429, "rate_limit_error", "the upstream provider's rate limit was reached"),
    (ContextLimitError, 400, "invalid_request_error",
     "the request is longer than the model's context window"),
    (ProviderTimeoutError, 504, "timeout", "the upstream provider did not answer in time"),
    (ProviderConnectionError, 502, "upstream_error",
     "the connection to the upstream provider failed before its answer was complete"),
    (ProviderResponseError, 502, "upstream_error",
     "the upstream provider sent a reply that is not its protocol"),
    (ProviderRequestError, 400, "invalid_request_error",
     "the upstream provider rejected the request"),
    (ServerError, 502, "upstream_error", "the upstream provider failed"),
    (ProviderError, 502, "upstream_error", "the upstream provider failed"),
    (CompactionRequiredError, 400, "invalid_request_error", ""),
    (SessionError, 400, "invalid_request_error", ""),
    (MessageError, 400, "invalid_request_error", ""),
    (CtxfoldError, 500, "server_error", ""),
)


def _provider_said(body: str) -> str:
    """The provider's own error message in ``body`` (``error.message``), if any."""
    try:
        data = json.loads(body) if body else None
    except ValueError:
        return ""
    error = data.get("error", data) if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or "")[:500]
    return error[:500] if isinstance(error, str) else ""


def error_answer(exc: BaseException, secret: str | None = None) -> tuple[int, dict[str, Any]]:
    """``(status, body)`` for a failure: the provider's own error status and body when it
    refused with one; otherwise a status that says who failed (502 for a reply that was
    malformed or dropped, 504 for a timeout, 4xx for what the client can change) and an
    OpenAI error envelope that names what failed without the upstream's address or the
    operator's settings. Every text is masked of secrets (``secret`` too: the key
    forwarded for this request)."""
    if isinstance(exc, ServeError):
        return exc.status, exc.body()
    status, kind, told = next(((s, k, t) for cls, s, k, t in _FALLBACK
                               if isinstance(exc, cls)), (500, "server_error", ""))
    code = "context_length_exceeded" if isinstance(
        exc, ContextLimitError | CompactionRequiredError) else None
    if not isinstance(exc, ProviderError):
        return status, error_envelope(redact_text(str(exc), secret), kind=kind, code=code)
    if exc.status is not None and exc.status >= 400:
        status = exc.status
        try:
            data = json.loads(redact_text(exc.body, secret)) if exc.body else None
        except ValueError:
            data = None
        if isinstance(data, dict) and (data.get("error") or data.get("message")):
            return status, data
    elif (reported := _anthropic_reported(exc.body, secret)) is not None:
        return reported
    said = redact_text(_provider_said(exc.body), secret)
    message = f"{told}: {said}" if said else told
    return status, error_envelope(message, kind=kind, code=code)


def _anthropic_reported(body: str, secret: str | None) -> tuple[int, dict[str, Any]] | None:
    """An Anthropic ``error`` event reported inside a 200 stream
    (https://docs.anthropic.com/en/docs/build-with-claude/streaming#error-events), as the
    status its type stands for and the body as it came: its ``overloaded_error`` stays one
    (clients decide on it whether to retry), not the proxy's own 502."""
    try:
        data = json.loads(redact_text(body, secret)) if body else None
    except ValueError:
        return None
    if not isinstance(data, dict) or not _is_anthropic(data):
        return None
    kind = data["error"].get("type")
    status = next((s for s, k in ANTHROPIC_KINDS.items() if k == kind), None)
    return (status, data) if status is not None and status >= 500 else None


def error_headers(exc: BaseException) -> dict[str, str]:
    """The headers a failure's answer carries: ``Retry-After`` when the provider asked
    for a wait."""
    wait = getattr(exc, "retry_after", None)
    if isinstance(wait, int | float) and wait > 0:
        return {"Retry-After": str(math.ceil(wait))}
    return {}


#: Anthropic's error ``type`` per HTTP status
#: (https://docs.anthropic.com/en/api/errors): the others of 4xx are invalid requests,
#: the others of 5xx ``api_error``.
ANTHROPIC_KINDS: dict[int, str] = {
    400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
    429: "rate_limit_error", 500: "api_error", 504: "timeout_error", 529: "overloaded_error"}


def anthropic_kind(status: int) -> str:
    """Anthropic's error ``type`` for an HTTP ``status``."""
    return ANTHROPIC_KINDS.get(status, "invalid_request_error" if status < 500 else "api_error")


def anthropic_envelope(message: str, status: int) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}`` (the Anthropic shape)."""
    return {"type": "error",
            "error": {"type": anthropic_kind(status), "message": redact_text(message)}}


def _is_anthropic(payload: Any) -> bool:
    return isinstance(payload, dict) and payload.get("type") == "error" \
        and isinstance(payload.get("error"), dict)


def path_wire(path: str) -> str:
    """The wire whose error shape a request ``path`` gets: ``messages`` under
    ``/v1/messages`` (an Anthropic client), ``chat`` elsewhere (OpenAI's envelope)."""
    return "messages" if path.removeprefix("/v1").startswith("/messages") else "chat"


def in_wire(status: int, payload: dict[str, Any], wire: str) -> dict[str, Any]:
    """An error body (:func:`error_answer`'s) in the shape of the client's ``wire``: on
    ``messages`` an Anthropic error body as it is, anything else as one whose ``type``
    follows the status (the message kept); on the OpenAI routes an Anthropic upstream's
    body as an OpenAI envelope of the same type and message."""
    if wire == "messages":
        if _is_anthropic(payload):
            return payload
        error = payload.get("error", payload)
        message = error.get("message") if isinstance(error, dict) else error
        return anthropic_envelope(str(message or f"the request failed ({status})"), status)
    if _is_anthropic(payload):
        error = payload["error"]
        return error_envelope(str(error.get("message") or ""),
                              kind=str(error.get("type") or "upstream_error"))
    return payload
