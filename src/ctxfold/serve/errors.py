"""The errors the proxy answers with (each becomes an OpenAI-shaped error response)."""

from __future__ import annotations

import json
from typing import Any

from ctxfold.kernel.errors import (
    AuthenticationError,
    CompactionRequiredError,
    ContextLimitError,
    CtxfoldError,
    MessageError,
    ProviderError,
    ProviderRequestError,
    ProviderTimeoutError,
    RateLimitError,
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


#: HTTP status and OpenAI error type of each failure that carries no status of its own.
_FALLBACK: tuple[tuple[type[BaseException], int, str], ...] = (
    (AuthenticationError, 401, "authentication_error"),
    (RateLimitError, 429, "rate_limit_error"),
    (ContextLimitError, 400, "invalid_request_error"),
    (ProviderTimeoutError, 504, "timeout"),
    (ProviderRequestError, 400, "invalid_request_error"),
    (ProviderError, 502, "upstream_error"),
    (CompactionRequiredError, 400, "invalid_request_error"),
    (SessionError, 400, "invalid_request_error"),
    (MessageError, 400, "invalid_request_error"),
    (CtxfoldError, 500, "server_error"),
)


def error_answer(exc: BaseException, secret: str | None = None) -> tuple[int, dict[str, Any]]:
    """``(status, body)`` for a failure: the provider's own status and error body when it
    sent one, else an OpenAI error envelope naming what failed; every text masked of
    secrets (``secret`` too: the key forwarded for this request)."""
    if isinstance(exc, ServeError):
        return exc.status, exc.body()
    status, kind = next(((s, k) for cls, s, k in _FALLBACK if isinstance(exc, cls)),
                        (500, "server_error"))
    code = "context_length_exceeded" if isinstance(
        exc, ContextLimitError | CompactionRequiredError) else None
    if isinstance(exc, ProviderError):
        # An error inside a 200 answer (an unparsable body) is no success for the client.
        status = exc.status if exc.status and exc.status >= 400 else status
        try:
            data = json.loads(redact_text(exc.body, secret)) if exc.body else None
        except ValueError:
            data = None
        if isinstance(data, dict) and (data.get("error") or data.get("message")):
            return status, data
    return status, error_envelope(redact_text(str(exc), secret), kind=kind, code=code)
