"""The kernel's HTTP client: one ``httpx.Client`` per provider, retries, SSE streaming.

Provider plugins never touch HTTP; they translate (see :mod:`ctxfold.kernel.wire`). This
module owns what every provider needs, in the manner of the anthropic/openai SDKs:

* retries with jittered exponential backoff on 408/409/429/5xx and connection errors,
  honouring ``retry-after-ms`` and ``Retry-After`` (seconds or an HTTP date) through one pure
  function, :func:`calculate_retry_timeout`;
* an idle timeout (no bytes: the httpx read timeout; bytes but no SSE event, e.g. only
  ``: keep-alive`` comments: the watchdog) and a total-duration ceiling, because DeepSeek can
  send keep-alive comments without ever starting inference (providers.md §1.7);
* typed errors from :mod:`ctxfold.kernel.errors` whose messages never contain the API key;
* the API key is read from the environment at request time, never stored in config;
* a ``transport=`` seam so tests run against ``httpx.MockTransport``.
"""

from __future__ import annotations

import email.utils
import json
import os
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import attrs
import httpx
from httpx_sse import EventSource, SSEError

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
from ctxfold.kernel.overflow import parse_context_limit

RETRYABLE_STATUSES = frozenset({408, 409, 429})
#: A server asking for a longer pause than this is not honoured literally (anthropic-sdk rule).
MAX_RETRY_AFTER = 60.0
_ERROR_BODY_LIMIT = 64 * 1024
# Keys echoed back by providers ("Incorrect API key provided: sk-ab***yz") are masked too.
_KEYLIKE = re.compile(r"\b(sk|tp|key)-[A-Za-z0-9_*\-]{4,}")


def calculate_retry_timeout(
    attempt: int,
    headers: Mapping[str, str] | None = None,
    *,
    base: float = 0.5,
    cap: float = 8.0,
    jitter: float | None = None,
    now: float | None = None,
) -> float:
    """Seconds to wait before retry number ``attempt + 1`` (``attempt`` counts from 0).

    A server hint wins when it is between 0 and :data:`MAX_RETRY_AFTER` seconds:
    ``retry-after-ms`` (milliseconds), then ``Retry-After`` (seconds or an HTTP date, measured
    from ``now``, default the wall clock). Otherwise ``min(base × 2^attempt, cap)`` reduced by
    up to 25 % of jitter (``jitter`` in [0, 1); random when ``None``), so concurrent clients do
    not retry in lockstep.
    """
    hint = _retry_after(headers or {}, time.time() if now is None else now)
    if hint is not None and 0 < hint <= MAX_RETRY_AFTER:
        return hint
    delay = min(base * (2.0 ** min(attempt, 32)), cap)
    fraction = random.random() if jitter is None else jitter
    return max(delay * (1.0 - 0.25 * fraction), 0.0)


def _retry_after(headers: Mapping[str, str], now: float) -> float | None:
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return float(email.utils.mktime_tz(parsed)) - now


def redact(text: str, secret: str | None) -> str:
    """``text`` with ``secret`` and anything that looks like an API key masked."""
    if secret:
        text = text.replace(secret, "***")
    return _KEYLIKE.sub(lambda m: m.group(1) + "-***", text)


@attrs.frozen
class HttpSettings:
    """Connection policy of one provider client (all durations in seconds)."""

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
        if now - self.started > s.total_timeout:
            raise ProviderTimeoutError(
                f"{s.provider}: response from {self.client.url_for('')} exceeded the "
                f"total-duration ceiling of {s.total_timeout:g}s; raise [provider] "
                "timeout_seconds for very long outputs or retry later"
            )
        if self.idle is not None and now - self.last_event > self.idle:
            raise ProviderTimeoutError(
                f"{s.provider}: no data from {self.client.url_for('')} for "
                f"{now - self.last_event:.0f}s (only keep-alives; idle timeout "
                f"{self.idle:g}s); the server is likely overloaded, retry later"
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
class SseEvent:
    """One server-sent event (comments and keep-alives never reach here)."""

    event: str
    data: str


@attrs.frozen
class EventStream:
    """The events of one streamed response and its request id."""

    events: Iterator[SseEvent]
    request_id: str = ""

    def __iter__(self) -> Iterator[SseEvent]:
        return self.events


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
        try:
            dog = _Watchdog(self, idle=None)  # blank lines are the only thing a wait sends
            response.stream = _WatchedStream(response.stream, dog)
            raw = b"".join(self._guard(response.iter_bytes(), key))
        finally:
            response.close()
        try:
            data = json.loads(raw)
        except ValueError:
            start = redact(raw[:80].decode("utf-8", "replace"), key)
            raise ProviderResponseError(
                f"{self.settings.provider}: {self.url_for(path)} returned a body that is "
                f"not JSON ({len(raw)} bytes, starts {start!r}); "
                "check [provider] base_url points at the API root",
                status=response.status_code,
            ) from None
        return JsonResult(data=data, request_id=_request_id(response))

    @contextmanager
    def stream_events(
        self, path: str, body: Mapping[str, Any], *, max_retries: int | None = None
    ) -> Iterator[EventStream]:
        """POST ``body`` and yield the :class:`EventStream`; the response is closed on exit
        (also on KeyboardInterrupt or any exception raised by the consumer).
        ``max_retries`` overrides the settings for this request (0: exactly one attempt)."""
        response, key = self._send(path, body, stream=True, max_retries=max_retries)
        dog = _Watchdog(self, idle=self.settings.idle_timeout)
        response.stream = _WatchedStream(response.stream, dog)
        try:
            yield EventStream(self._events(response, dog, key), _request_id(response))
        finally:
            response.close()

    def scrub(self, text: str) -> str:
        """``text`` with this client's key (explicit or from the env) and key-like strings
        masked; applied to every provider-originated text that reaches an error message."""
        s = self.settings
        return redact(text, s.api_key or os.environ.get(s.api_key_env) or None)

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    # -- internals -----------------------------------------------------------------------

    def _events(
        self, response: httpx.Response, dog: _Watchdog, key: str | None
    ) -> Iterator[SseEvent]:
        source = EventSource(response)
        for sse in self._guard(source.iter_sse(), key):
            dog.event()
            yield SseEvent(event=sse.event, data=sse.data)

    def _guard(self, it: Iterator[Any], key: str | None) -> Iterator[Any]:
        """Map transport failures while reading a body to typed errors."""
        where = f"{self.settings.provider}: reading the response from {self.url_for('')}"
        try:
            yield from it
        except SSEError as exc:  # an httpx.TransportError subclass, but not a network fault
            raise ProviderResponseError(
                f"{self.settings.provider}: expected an event stream from {self.url_for('')}: "
                f"{exc}; check [provider] base_url and name"
            ) from None
        except httpx.TimeoutException:
            raise ProviderTimeoutError(
                f"{where}: no data for {self.settings.idle_timeout:g}s (idle timeout); "
                "retry later or raise the idle timeout"
            ) from None
        except httpx.TransportError as exc:
            raise ProviderConnectionError(
                f"{where}: connection dropped ({type(exc).__name__}: "
                f"{redact(str(exc), key)}); retry the request"
            ) from None

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
            except httpx.TimeoutException as exc:
                error: ProviderError = ProviderTimeoutError(
                    f"{s.provider}: POST {url} timed out ({type(exc).__name__}) after "
                    f"{attempt + 1} attempt(s); check the network or retry later")
            except httpx.TransportError as exc:
                error = ProviderConnectionError(
                    f"{s.provider}: could not reach POST {url} ({type(exc).__name__}: "
                    f"{redact(str(exc), key)}) after {attempt + 1} attempt(s); "
                    "check [provider] base_url and the network")
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
        status = response.status_code
        try:
            raw = b""
            for chunk in response.iter_bytes():
                raw += chunk
                if len(raw) >= _ERROR_BODY_LIMIT:
                    break
            text = raw.decode("utf-8", "replace")
        except httpx.HTTPError:
            text = ""
        finally:
            response.close()
        s = self.settings
        detail = redact(_error_detail(text), key)
        rid = _request_id(response)
        where = f"{s.provider}: POST {url} returned HTTP {status}" + (
            f" (request id {rid})" if rid else "")
        tries = f" after {attempt + 1} attempt(s)"
        if status in (401, 403):
            return AuthenticationError(
                f"{where}: {detail}; check that ${s.api_key_env} holds a valid key for "
                f"{s.base_url} (keys of different plans/regions are not interchangeable)",
                status=status), False
        overflow = parse_context_limit(status, text)
        if overflow is not None:
            return ContextLimitError(
                f"{where}: {redact(str(overflow), key)}", window=overflow.window,
                prompt=overflow.prompt, completion=overflow.completion, status=status), False
        if status == 429:
            return RateLimitError(
                f"{where}{tries}: {detail}; rate or concurrency limit reached, wait and retry "
                "or lower parallelism", status=status), True
        if status >= 500:
            return ServerError(
                f"{where}{tries}: {detail}; the provider is failing or overloaded, retry later",
                status=status), True
        if status == 408:
            return ProviderTimeoutError(
                f"{where}{tries}: {detail}; the server timed out, retry later",
                status=status), True
        return ProviderRequestError(
            f"{where}{tries if status == 409 else ''}: {detail}; the provider rejected the "
            "request, check [provider] model and the request settings",
            status=status), status in RETRYABLE_STATUSES


def _request_id(response: httpx.Response) -> str:
    h = response.headers
    return h.get("x-request-id") or h.get("x-deepseek-request-id") or h.get("request-id") or ""


def _error_detail(text: str) -> str:
    """The provider's error message (``error.message`` / ``message``), trimmed."""
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
