"""The HTTP client every provider uses: one ``httpx.Client`` per provider, retries, SSE.

Provider plugins never touch HTTP; they translate (a
:class:`~ctxfold.kernel.contracts.Translator`). This module owns what every provider needs, in
the manner of the anthropic/openai SDKs:

* retries on 408/409/429/5xx and connection errors with the waits of
  :mod:`ctxfold.transport.retry`;
* an idle timeout (no bytes: the httpx read timeout; bytes but no SSE event, e.g. only
  ``: keep-alive`` comments: the watchdog) and a total-duration ceiling, because DeepSeek can
  send keep-alive comments without ever starting inference
  (https://api-docs.deepseek.com/quick_start/rate_limit);
* typed errors (:mod:`ctxfold.transport.errors`) whose texts never contain a secret;
* the API key read from the environment at request time, never stored in config;
* a ``transport=`` seam so tests run against ``httpx.MockTransport``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import attrs
import httpx
from httpx_sse import EventSource, SSEError

from ctxfold.kernel.errors import AuthenticationError, ProviderError, ProviderTimeoutError
from ctxfold.kernel.secrets import redact_text
from ctxfold.kernel.types import SseEvent
from ctxfold.transport import errors
from ctxfold.transport.errors import OverflowParser
from ctxfold.transport.retry import calculate_retry_timeout


@attrs.frozen
class HttpSettings:
    """Connection policy of one provider client (all durations in seconds).

    ``parse_overflow`` and ``request_id_headers`` come from what the provider declares
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


class _Watchdog:
    """Enforces the total ceiling and the no-event idle timeout as bytes arrive."""

    def __init__(self, client: HttpClient, idle: float | None) -> None:
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


class _WatchedStream(httpx.SyncByteStream):
    def __init__(self, inner: Any, dog: _Watchdog) -> None:
        self.inner = inner
        self.dog = dog

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.inner:
            self.dog.check()
            yield chunk

    def close(self) -> None:
        self.inner.close()


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


class HttpClient:
    """One provider's HTTP client. ``sleep``/``clock`` are seams for tests."""

    def __init__(
        self,
        settings: HttpSettings,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.sleep = sleep
        self.clock = clock
        timeout = httpx.Timeout(
            connect=settings.connect_timeout,
            read=settings.idle_timeout,
            write=settings.idle_timeout,
            pool=settings.connect_timeout,
        )
        self._client = httpx.Client(timeout=timeout, transport=transport)

    # -- public --------------------------------------------------------------------------

    def url_for(self, path: str) -> str:
        """Absolute URL of ``path`` under the base URL."""
        return self.settings.base_url.rstrip("/") + path

    def api_key(self) -> str | None:
        """The key, read now (explicit key first, then ``$api_key_env``)."""
        s = self.settings
        key = s.api_key if s.api_key is not None else os.environ.get(s.api_key_env, "")
        if not key and s.require_key:
            raise AuthenticationError(
                f"{s.provider}: environment variable {s.api_key_env} is not set or empty; "
                f"export {s.api_key_env}=<your key> or set [provider] api_key_env to the "
                "variable that holds it",
                status=None,
            )
        return key or None

    def post_json(
        self, path: str, body: Mapping[str, Any], *, max_retries: int | None = None
    ) -> JsonResult:
        """POST ``body`` and parse a JSON answer (blank keep-alive lines before it are fine).
        ``max_retries`` overrides the settings for this request (0: exactly one attempt)."""
        response, key = self._send(path, body, stream=False, max_retries=max_retries)
        rid = self._request_id(response)
        try:
            dog = _Watchdog(self, idle=None)  # blank lines are the only thing a wait sends
            response.stream = _WatchedStream(response.stream, dog)
            raw = b"".join(self._guard(response.iter_bytes(), key, rid))
        finally:
            response.close()
        try:
            data = json.loads(raw)
        except ValueError:
            raise errors.not_json(self.settings.provider, self.url_for(path), raw,
                                  response.status_code, key, rid) from None
        return JsonResult(data=data, request_id=rid)

    @contextmanager
    def stream_events(
        self, path: str, body: Mapping[str, Any], *, max_retries: int | None = None
    ) -> Iterator[EventStream]:
        """POST ``body`` and yield the :class:`EventStream`; the response is closed on exit
        (also on KeyboardInterrupt or any exception raised by the consumer).
        ``max_retries`` overrides the settings for this request (0: exactly one attempt)."""
        response, key = self._send(path, body, stream=True, max_retries=max_retries)
        rid = self._request_id(response)
        dog = _Watchdog(self, idle=self.settings.idle_timeout)
        response.stream = _WatchedStream(response.stream, dog)
        try:
            yield EventStream(self._events(response, dog, key, rid), rid)
        finally:
            response.close()

    def scrub(self, text: str) -> str:
        """``text`` with this client's key (explicit or from the env) and other secrets
        masked; applied to every provider-originated text that reaches an error message."""
        s = self.settings
        return redact_text(text, s.api_key or os.environ.get(s.api_key_env) or None)

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    # -- internals -----------------------------------------------------------------------

    def _request_id(self, response: httpx.Response) -> str:
        return request_id_of(response.headers, self.settings.request_id_headers)

    def _events(
        self, response: httpx.Response, dog: _Watchdog, key: str | None, rid: str
    ) -> Iterator[SseEvent]:
        source = EventSource(response)
        for sse in self._guard(source.iter_sse(), key, rid):
            dog.event()
            yield SseEvent(event=sse.event, data=sse.data)

    def _guard(self, it: Iterator[Any], key: str | None, rid: str) -> Iterator[Any]:
        """Map transport failures while reading a body to typed errors."""
        try:
            yield from it
        except httpx.TransportError as exc:
            # SSEError is an httpx.TransportError subclass, but not a network fault.
            kind = ("sse" if isinstance(exc, SSEError) else
                    "timeout" if isinstance(exc, httpx.TimeoutException) else "dropped")
            raise errors.read_error(self.settings.provider, exc, self.url_for(""),
                                    self.settings.idle_timeout, key, rid, kind=kind) from None

    def _headers(self, stream: bool) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "User-Agent": "ctxfold"}
        headers["Accept"] = "text/event-stream" if stream else "application/json"
        headers.update(self.settings.headers)
        key = self.api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _send(
        self, path: str, body: Mapping[str, Any], *, stream: bool, max_retries: int | None = None
    ) -> tuple[httpx.Response, str | None]:
        s = self.settings
        retries = s.max_retries if max_retries is None else max_retries
        url = self.url_for(path)
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        attempt = 0
        while True:
            headers = self._headers(stream)  # key read per attempt: rotation takes effect
            key = headers.get("Authorization", "")[7:] or None
            delay_headers: Mapping[str, str] = {}
            try:
                request = self._client.build_request("POST", url, content=content,
                                                     headers=headers)
                response = self._client.send(request, stream=True)
            except httpx.TransportError as exc:
                error: ProviderError = errors.send_error(
                    s.provider, exc, url, attempt + 1, key,
                    timeout=isinstance(exc, httpx.TimeoutException))
            else:
                if response.status_code < 400:
                    return response, key
                error, retryable = self._status_error(response, url, attempt, key)
                delay_headers = response.headers
                if not retryable:
                    raise error
            if attempt >= retries:
                raise error
            self.sleep(calculate_retry_timeout(attempt, delay_headers))
            attempt += 1

    def _status_error(
        self, response: httpx.Response, url: str, attempt: int, key: str | None
    ) -> tuple[ProviderError, bool]:
        try:
            raw = b""
            for chunk in response.iter_bytes():
                raw += chunk
                if len(raw) >= errors.ERROR_BODY_LIMIT:
                    break
            text = raw.decode("utf-8", "replace")
        except httpx.HTTPError:
            text = ""
        finally:
            response.close()
        s = self.settings
        return errors.status_error(
            provider=s.provider, status=response.status_code, text=text, url=url,
            attempts=attempt + 1, request_id=self._request_id(response), key=key,
            api_key_env=s.api_key_env, base_url=s.base_url, parse_overflow=s.parse_overflow,
        )
