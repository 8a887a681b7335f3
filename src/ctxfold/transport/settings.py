"""What the provider clients share: their settings, results, stream watchdog and the
request parts that do not depend on sync or async I/O (URL, key, headers, error mapping)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from ctxfold.kernel.errors import AuthenticationError, ProviderError, ProviderTimeoutError
from ctxfold.kernel.types import SseEvent
from ctxfold.secrets import holds_a_secret_not_a_name, redact_text, remember_secret
from ctxfold.transport import errors
from ctxfold.transport.errors import OverflowParser
from ctxfold.transport.retry import (
    MAX_RETRY_AFTER,
    calculate_retry_timeout,
    server_wait,
    wait_beyond_cap,
)


@attrs.frozen
class HttpSettings:
    """Connection policy of one provider client (all durations in seconds).

    ``parse_overflow``, ``request_id_headers``, ``headers``, ``key_header`` and
    ``key_prefix`` come from what the provider declares
    (:class:`~ctxfold.kernel.contracts.ProviderDefaults`).
    """

    base_url: str
    api_key_env: str
    provider: str = "provider"
    api_key: str | None = None  # explicit key (tests, emulator); otherwise read from the env
    connect_timeout: float = 10.0
    idle_timeout: float = 120.0
    total_timeout: float = 600.0
    max_retries: int = 2
    require_key: bool = True
    headers: Mapping[str, str] = attrs.field(factory=dict)
    parse_overflow: OverflowParser | None = None
    request_id_headers: tuple[str, ...] = ("x-request-id", "request-id")
    key_header: str = "Authorization"
    key_prefix: str = "Bearer "


class Watchdog:
    """Enforces the total ceiling and the no-event idle timeout as bytes arrive."""

    def __init__(self, client: ClientBase, idle: float | None) -> None:
        self.client = client
        self.clock = client.clock
        self.started = self.last_event = self.clock()
        self.idle = idle

    def event(self) -> None:
        self.last_event = self.clock()

    def check(self) -> None:
        now = self.clock()
        s = self.client.settings
        where = redact_text(self.client.url_for(""))
        if now - self.started > s.total_timeout:
            raise ProviderTimeoutError(
                f"{s.provider}: response from {where} exceeded the total-duration ceiling of "
                f"{s.total_timeout:g}s; raise [provider] timeout_seconds for very long outputs "
                "or retry later"
            )
        if self.idle is not None and now - self.last_event > self.idle:
            raise ProviderTimeoutError(
                f"{s.provider}: no data from {where} for {now - self.last_event:.0f}s (only "
                f"keep-alives; idle timeout {self.idle:g}s); the server is likely overloaded, "
                "retry later"
            )


@attrs.frozen
class JsonResult:
    """A parsed non-streaming response."""

    data: Any
    request_id: str = ""


@attrs.frozen
class EventStream:
    """The events of one streamed response and its request id."""

    events: Iterator[SseEvent]
    request_id: str = ""

    def __iter__(self) -> Iterator[SseEvent]:
        return self.events


def request_id_of(headers: Mapping[str, str], names: tuple[str, ...]) -> str:
    """The first of the provider's request-id headers present in ``headers``."""
    for name in names:
        value = headers.get(name)
        if value:
            return str(value)
    return ""


class RedactingFilter(logging.Filter):
    """Masks secrets in the records of the HTTP libraries' loggers: httpx logs every request
    URL at INFO, and a ``base_url`` with ``user:password@`` would otherwise reach the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact_text(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


_FILTER = RedactingFilter()


def guard_http_logs() -> None:
    """Install :class:`RedactingFilter` on the httpx and httpcore loggers (once)."""
    for name in ("httpx", "httpcore"):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def serialize_body(body: Mapping[str, Any]) -> bytes:
    """The exact bytes sent for ``body`` (compact JSON, UTF-8, key order preserved)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


class ClientBase:
    """What the sync and async clients share: settings, URL, key, headers, scrubbing."""

    settings: HttpSettings
    clock: Callable[[], float]

    def url_for(self, path: str) -> str:
        """Absolute URL of ``path`` under the base URL."""
        return self.settings.base_url.rstrip("/") + path

    def api_key(self) -> str | None:
        """The key, read now (explicit key first, then ``$api_key_env``)."""
        s = self.settings
        key = s.api_key if s.api_key is not None else os.environ.get(s.api_key_env, "")
        if not key and s.require_key and holds_a_secret_not_a_name("api_key_env", s.api_key_env):
            raise AuthenticationError(
                f"{s.provider}: [provider] api_key_env holds something that is not an "
                "environment variable name (a pasted key?); set it to the variable's name "
                "(e.g. DEEPSEEK_API_KEY) and export the key in that variable",
                status=None,
            )
        if not key and s.require_key:
            raise AuthenticationError(
                f"{s.provider}: environment variable {s.api_key_env} is not set or empty; "
                f"export {s.api_key_env}=<your key> or set [provider] api_key_env to the "
                "variable that holds it",
                status=None,
            )
        remember_secret(key)  # masked by value in every error and log text from now on
        return key or None

    def scrub(self, text: str) -> str:
        """``text`` with this client's key (explicit or from the env) and other secrets
        masked; applied to every provider-originated text that reaches an error message."""
        s = self.settings
        return redact_text(text, s.api_key or os.environ.get(s.api_key_env) or None)

    def headers(self, stream: bool) -> dict[str, str]:
        """Request headers, with the key read per attempt (a rotation takes effect)."""
        headers = {"Content-Type": "application/json", "User-Agent": "ctxfold"}
        headers["Accept"] = "text/event-stream" if stream else "application/json"
        headers.update(self.settings.headers)
        key = self.api_key()
        if key:
            headers[self.settings.key_header] = self.settings.key_prefix + key
        return headers

    def key_in(self, headers: Mapping[str, str]) -> str | None:
        """The key :meth:`headers` put in ``headers`` (to mask it in error texts)."""
        value = headers.get(self.settings.key_header, "")
        return value[len(self.settings.key_prefix):] or None

    def request_id(self, headers: Mapping[str, str]) -> str:
        """The first of the provider's request-id headers present."""
        return request_id_of(headers, self.settings.request_id_headers)

    def timeout(self) -> Any:
        """The httpx timeout of the settings (connect, idle read/write, pool)."""
        import httpx

        s = self.settings
        return httpx.Timeout(connect=s.connect_timeout, read=s.idle_timeout,
                             write=s.idle_timeout, pool=s.connect_timeout)

    @staticmethod
    def encoded(body: Mapping[str, Any] | bytes) -> bytes:
        """The request's bytes: ``body`` serialized, or as given when it is already
        encoded."""
        return body if isinstance(body, bytes) else serialize_body(body)

    def unanswered(self, exc: Exception, url: str, attempt: int,
                   key: str | None) -> ProviderError:
        """The error of attempt ``attempt`` (from 0) whose request got no answer."""
        import httpx

        return errors.send_error(self.settings.provider, exc, url, attempt + 1, key,
                                 timeout=isinstance(exc, httpx.TimeoutException))

    def retry_wait(self, error: ProviderError, retryable: bool, answered: Mapping[str, str],
                   attempt: int, retries: int) -> float:
        """After failed attempt ``attempt`` (from 0; ``answered``: the error response's
        headers, empty when there was none), the seconds to wait before the next one — or
        ``error`` raised: not retryable, out of ``retries``, or the server asks for a wait
        beyond :data:`~ctxfold.transport.retry.MAX_RETRY_AFTER` (said in the error). The
        one retry rule of both clients."""
        error.retry_after = error.retry_after or server_wait(answered)
        if not retryable:
            raise error
        wait = wait_beyond_cap(answered)
        if wait is not None:  # a retry sooner would be refused: say so and stop
            raise errors.wait_refused(error, wait, MAX_RETRY_AFTER)
        if attempt >= retries:
            raise error
        return calculate_retry_timeout(attempt, answered)

    def status_error(self, status: int, text: str, url: str, attempt: int, key: str | None,
                     headers: Mapping[str, str]) -> tuple[ProviderError, bool]:
        """``(error, retryable)`` for an HTTP error response."""
        s = self.settings
        return errors.status_error(
            provider=s.provider, status=status, text=text, url=url, attempts=attempt + 1,
            request_id=self.request_id(headers), key=key, api_key_env=s.api_key_env,
            base_url=s.base_url, parse_overflow=s.parse_overflow,
        )
