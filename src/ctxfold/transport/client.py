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

:mod:`ctxfold.transport.aclient` is the same over ``httpx.AsyncClient``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx
from httpx_sse import EventSource, SSEError

from ctxfold.kernel.errors import ProviderError
from ctxfold.kernel.types import SseEvent
from ctxfold.transport import errors
from ctxfold.transport.settings import (
    ClientBase,
    EventStream,
    HttpSettings,
    JsonResult,
    Watchdog,
    guard_http_logs,
    request_id_of,
)

__all__ = ["EventStream", "HttpClient", "HttpSettings", "JsonResult", "request_id_of"]


class _WatchedStream(httpx.SyncByteStream):
    def __init__(self, inner: Any, dog: Watchdog) -> None:
        self.inner = inner
        self.dog = dog

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.inner:
            self.dog.check()
            yield chunk

    def close(self) -> None:
        self.inner.close()


def read_kind(exc: httpx.TransportError) -> str:
    """How a failure while reading a body is reported (SSEError is an httpx.TransportError
    subclass, but not a network fault)."""
    if isinstance(exc, SSEError):
        return "sse"
    return "timeout" if isinstance(exc, httpx.TimeoutException) else "dropped"


class HttpClient(ClientBase):
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
        guard_http_logs()
        self._client = httpx.Client(timeout=self.timeout(), transport=transport)

    def post_json(
        self, path: str, body: Mapping[str, Any], *, max_retries: int | None = None
    ) -> JsonResult:
        """POST ``body`` and parse a JSON answer (blank keep-alive lines before it are fine).
        ``max_retries`` overrides the settings for this request (0: exactly one attempt)."""
        response, key = self._send(path, body, stream=False, max_retries=max_retries)
        rid = self.request_id(response.headers)
        try:
            dog = Watchdog(self, idle=None)  # blank lines are the only thing a wait sends
            response.stream = _WatchedStream(response.stream, dog)
            raw = b"".join(self._guard(response.iter_bytes(), key, rid))
        finally:
            response.close()
        data = errors.json_body(self.settings.provider, self.url_for(path), raw,
                                response.status_code, key, rid)
        return JsonResult(data=data, request_id=rid)

    @contextmanager
    def stream_events(
        self, path: str, body: Mapping[str, Any], *, max_retries: int | None = None
    ) -> Iterator[EventStream]:
        """POST ``body`` and yield the :class:`EventStream`; the response is closed on exit
        (also on KeyboardInterrupt or any exception raised by the consumer).
        ``max_retries`` overrides the settings for this request (0: exactly one attempt)."""
        response, key = self._send(path, body, stream=True, max_retries=max_retries)
        rid = self.request_id(response.headers)
        dog = Watchdog(self, idle=self.settings.idle_timeout)
        response.stream = _WatchedStream(response.stream, dog)
        try:
            yield EventStream(self._events(response, dog, key, rid), rid)
        finally:
            response.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    # -- internals -----------------------------------------------------------------------

    def _events(
        self, response: httpx.Response, dog: Watchdog, key: str | None, rid: str
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
            raise errors.read_error(self.settings.provider, exc, self.url_for(""),
                                    self.settings.idle_timeout, key, rid,
                                    kind=read_kind(exc)) from None

    def _send(
        self, path: str, body: Mapping[str, Any], *, stream: bool, max_retries: int | None = None
    ) -> tuple[httpx.Response, str | None]:
        retries = self.settings.max_retries if max_retries is None else max_retries
        url, content = self.url_for(path), self.encoded(body)
        attempt = 0
        while True:
            headers = self.headers(stream)  # key read per attempt: rotation takes effect
            key = self.key_in(headers)
            answered: Mapping[str, str] = {}
            try:
                request = self._client.build_request("POST", url, content=content,
                                                     headers=headers)
                response = self._client.send(request, stream=True)
            except httpx.TransportError as exc:
                error, retryable = self.unanswered(exc, url, attempt, key), True
            else:
                if response.status_code < 400:
                    return response, key
                error, retryable = self._status_error(response, url, attempt, key)
                answered = response.headers
            self.sleep(self.retry_wait(error, retryable, answered, attempt, retries))
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
        return self.status_error(response.status_code, text, url, attempt, key,
                                 response.headers)
