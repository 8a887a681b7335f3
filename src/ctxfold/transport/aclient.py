"""The async HTTP client: :class:`~ctxfold.transport.client.HttpClient` over
``httpx.AsyncClient``, with the same retries, stream ceilings and typed errors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
from httpx_sse import EventSource

from ctxfold.kernel.errors import ProviderError
from ctxfold.kernel.types import SseEvent
from ctxfold.transport import errors
from ctxfold.transport.client import read_kind
from ctxfold.transport.settings import (
    ClientBase,
    HttpSettings,
    JsonResult,
    Watchdog,
    guard_http_logs,
)


@attrs.frozen
class AsyncEventStream:
    """The events of one streamed response and its request id."""

    events: AsyncIterator[SseEvent]
    request_id: str = ""

    def __aiter__(self) -> AsyncIterator[SseEvent]:
        return self.events


class _WatchedStream(httpx.AsyncByteStream):
    def __init__(self, inner: Any, dog: Watchdog) -> None:
        self.inner = inner
        self.dog = dog

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.dog.check()
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class AsyncHttpClient(ClientBase):
    """One provider's async HTTP client. ``sleep``/``clock`` are seams for tests."""

    def __init__(
        self,
        settings: HttpSettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.sleep = sleep
        self.clock = clock
        guard_http_logs()
        self._client = httpx.AsyncClient(timeout=self.timeout(), transport=transport)

    async def post_json(
        self, path: str, body: Mapping[str, Any] | bytes, *, max_retries: int | None = None
    ) -> JsonResult:
        """POST ``body`` (or its JSON bytes, already encoded) and parse a JSON answer."""
        response, key = await self._send(path, body, stream=False, max_retries=max_retries)
        rid = self.request_id(response.headers)
        try:
            dog = Watchdog(self, idle=None)
            response.stream = _WatchedStream(response.stream, dog)
            raw = b"".join([chunk async for chunk in self._guard(response.aiter_bytes(),
                                                                  key, rid)])
        finally:
            await response.aclose()
        data = errors.json_body(self.settings.provider, self.url_for(path), raw,
                                response.status_code, key, rid)
        return JsonResult(data=data, request_id=rid)

    @asynccontextmanager
    async def stream_events(
        self, path: str, body: Mapping[str, Any] | bytes, *, max_retries: int | None = None
    ) -> AsyncIterator[AsyncEventStream]:
        """POST ``body`` and yield the event stream; the response is closed on exit."""
        response, key = await self._send(path, body, stream=True, max_retries=max_retries)
        rid = self.request_id(response.headers)
        dog = Watchdog(self, idle=self.settings.idle_timeout)
        response.stream = _WatchedStream(response.stream, dog)
        try:
            yield AsyncEventStream(self._events(response, dog, key, rid), rid)
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def _events(
        self, response: httpx.Response, dog: Watchdog, key: str | None, rid: str
    ) -> AsyncIterator[SseEvent]:
        source = EventSource(response)
        async for sse in self._guard(source.aiter_sse(), key, rid):
            dog.event()
            yield SseEvent(event=sse.event, data=sse.data)

    async def _guard(self, it: AsyncIterator[Any], key: str | None, rid: str
                     ) -> AsyncIterator[Any]:
        try:
            async for item in it:
                yield item
        except httpx.TransportError as exc:
            raise errors.read_error(self.settings.provider, exc, self.url_for(""),
                                    self.settings.idle_timeout, key, rid,
                                    kind=read_kind(exc)) from None

    async def _send(
        self, path: str, body: Mapping[str, Any] | bytes, *, stream: bool,
        max_retries: int | None = None
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
                response = await self._client.send(request, stream=True)
            except httpx.TransportError as exc:
                error, retryable = self.unanswered(exc, url, attempt, key), True
            else:
                if response.status_code < 400:
                    return response, key
                error, retryable = await self._status_error(response, url, attempt, key)
                answered = response.headers
            await self.sleep(self.retry_wait(error, retryable, answered, attempt, retries))
            attempt += 1

    async def _status_error(
        self, response: httpx.Response, url: str, attempt: int, key: str | None
    ) -> tuple[ProviderError, bool]:
        try:
            raw = b""
            async for chunk in response.aiter_bytes():
                raw += chunk
                if len(raw) >= errors.ERROR_BODY_LIMIT:
                    break
            text = raw.decode("utf-8", "replace")
        except httpx.HTTPError:
            text = ""
        finally:
            await response.aclose()
        return self.status_error(response.status_code, text, url, attempt, key,
                                 response.headers)
