"""A provider = the transport's HTTP client + a plugin's translator (design §7.1).

A provider plugin supplies a :class:`~ctxfold.kernel.contracts.Translator`: it turns a
:class:`~ctxfold.kernel.types.ChatRequest` into the provider's request body, and the
provider's answer (one JSON document, or a stream of SSE events fed to a
:class:`~ctxfold.kernel.contracts.StreamAssembler`) into a
:class:`~ctxfold.kernel.types.ChatResponse`. Everything else — the HTTP client, auth,
retries, timeouts, typed errors, cancellation — is :class:`HttpProvider`. A new provider
plugin is therefore one translator, its :class:`~ctxfold.kernel.contracts.ProviderDefaults`
and one factory calling :func:`build_http_provider`; see ``docs/providers.md``.

Partial results: :meth:`HttpProvider.complete` returns a complete response or raises. If a
stream broke (dropped connection, malformed chunk, timeout, KeyboardInterrupt) after some
output arrived, the exception carries ``partial_message`` (a :class:`~ctxfold.Message` with
``partial=True``); read it with :func:`partial_message_of` and record it as partial, or not at
all. The response is always closed.

Dropped connections (design §7.1: connection errors are retryable): a response whose connection
dropped, or whose stream ended early, *before any output arrived* (no text, reasoning or tool
call: at most bookkeeping events) is sent again, within the same ``max_retries`` budget and
backoff as the HTTP layer's retries. A stream that delivered output is never replayed: its
exception carries the partial message, and nothing half-received is ever retried into a reply.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ctxfold.kernel.contracts import StreamAssembler, Translator
from ctxfold.kernel.errors import PluginError, ProviderError
from ctxfold.kernel.kinds import ProviderDefaults, ProviderOptions, StrategyContext
from ctxfold.kernel.types import ChatRequest, ChatResponse, Message
from ctxfold.transport.errors import ResponseDropped
from ctxfold.transport.retry import calculate_retry_timeout
from ctxfold.transport.settings import serialize_body

if TYPE_CHECKING:  # httpx (≈0.3 s to import) loads only when a provider is built
    from ctxfold.transport.aclient import AsyncHttpClient
    from ctxfold.transport.client import HttpClient

#: The output ladder of MiMo and Responses when a request leaves the budget to the provider.
OUTPUT_LADDER = {"plain": 16_384, "reasoning": 32_768, "deep": 65_536}


def ladder_budget(effort: str) -> int:
    """16K plain (effort ``none``), 32K reasoning (low/medium), 64K for high/max effort."""
    if effort == "none":
        return OUTPUT_LADDER["plain"]
    if effort in ("high", "max"):
        return OUTPUT_LADDER["deep"]
    return OUTPUT_LADDER["reasoning"]


def output_budget(request: ChatRequest, defaults: ProviderDefaults,
                  model: str = "") -> int | None:
    """The output budget to send for ``request`` under the provider's declared rule, or
    ``None`` to omit the field.

    An explicit ``max_output_tokens`` wins; else the provider's budget for the effort within
    what ``model`` (default: the request's) accepts (:meth:`ProviderDefaults.auto_budget`).
    Either is clipped to the window's ``output_room`` when known. A provider that declares
    ``omit_output_field`` (DeepSeek) sends nothing unless the room is tighter than its own
    default, and then sends the room.
    """
    room = request.output_room
    if request.max_output_tokens > 0:
        cap = request.max_output_tokens
        return min(cap, room) if room > 0 else cap
    auto = defaults.auto_budget(request.effort, model or request.model)
    if defaults.omit_output_field:
        return room if 0 < room < auto else None
    return min(auto, room) if room > 0 else auto


def partial_message_of(exc: BaseException) -> Message | None:
    """The partially received assistant message attached to ``exc``, if any."""
    value = getattr(exc, "partial_message", None)
    return value if isinstance(value, Message) else None


class HttpProvider:
    """A :class:`~ctxfold.kernel.contracts.Provider` over the transport's HTTP client."""

    def __init__(
        self,
        *,
        name: str,
        translator: Translator,
        http: HttpClient,
        model: str,
        context_window: int,
        cache_ttl_minutes: int,
        on_request: Callable[[Mapping[str, Any]], None] | None = None,
        async_http: Callable[[], AsyncHttpClient] | None = None,
    ) -> None:
        self.name = name
        self.translator = translator
        self.http = http
        self.model = model
        self.context_window = context_window
        self.cache_ttl_minutes = cache_ttl_minutes
        self.on_request = on_request
        self._make_async = async_http
        self._async: AsyncHttpClient | None = None

    def body(self, request: ChatRequest) -> dict[str, Any]:
        """The request body that :meth:`complete` would send (for tests and tooling)."""
        return self.translator.build_body(request, model=request.model or self.model)

    def serialize(self, request: ChatRequest) -> bytes:
        """The exact request bytes (invariant 4 compares these between turns)."""
        return serialize_body(self.body(request))

    def complete(self, request: ChatRequest) -> ChatResponse:
        """Send ``request``; return the full response or raise a ProviderError (or the
        interrupting exception) carrying ``partial_message`` when output was cut off. A
        connection that dropped before any output arrived is retried (see the module)."""
        body = self.body(request)
        if self.on_request is not None:
            self.on_request(body)
        attempt = 0
        while True:
            try:
                return self._attempt(request, body)
            except ResponseDropped as exc:
                if not self._retry_drop(request, exc, attempt):
                    raise
            self.http.sleep(calculate_retry_timeout(attempt))
            attempt += 1

    def _attempt(self, request: ChatRequest, body: dict[str, Any]) -> ChatResponse:
        assembler: StreamAssembler | None = None
        try:
            if not request.stream:
                result = self.http.post_json(
                    self.translator.path, body, max_retries=request.max_retries
                )
                return self.translator.parse_response(result.data, result.request_id)
            assembler = self.translator.new_stream()
            with self.http.stream_events(
                self.translator.path, body, max_retries=request.max_retries
            ) as stream:
                for event in stream:
                    if assembler.feed(event):
                        break
                return assembler.finish(stream.request_id)
        except BaseException as exc:  # KeyboardInterrupt included: report what arrived
            if isinstance(exc, ProviderError):
                # provider-originated text may echo a key; never let it through
                exc.args = tuple(self.http.scrub(str(a)) for a in exc.args)
            if assembler is not None:
                _attach_partial(exc, assembler.partial())
            raise

    def _retry_drop(self, request: ChatRequest, exc: ResponseDropped, attempt: int) -> bool:
        """Whether a dropped response may be sent again: nothing arrived, budget left."""
        budget = self.http.settings.max_retries if request.max_retries is None \
            else request.max_retries
        if partial_message_of(exc) is not None:
            return False
        if attempt >= budget:
            if attempt:
                exc.args = (f"{exc.args[0] if exc.args else exc} ({attempt + 1} attempts, "
                            "each dropped before any output)", *exc.args[1:])
            return False
        return True

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        """:meth:`complete` over the async client (created on first use)."""
        if self._async is None:
            if self._make_async is None:
                raise ProviderError(f"{self.name}: this provider was built without an async "
                                    "client; build it with build_http_provider")
            self._async = self._make_async()
        body = self.body(request)
        if self.on_request is not None:
            self.on_request(body)
        attempt = 0
        while True:
            try:
                return await self._aattempt(self._async, request, body)
            except ResponseDropped as exc:
                if not self._retry_drop(request, exc, attempt):
                    raise
            await self._async.sleep(calculate_retry_timeout(attempt))
            attempt += 1

    async def _aattempt(self, http: AsyncHttpClient, request: ChatRequest,
                        body: dict[str, Any]) -> ChatResponse:
        assembler: StreamAssembler | None = None
        try:
            if not request.stream:
                result = await http.post_json(self.translator.path, body,
                                              max_retries=request.max_retries)
                return self.translator.parse_response(result.data, result.request_id)
            assembler = self.translator.new_stream()
            async with http.stream_events(self.translator.path, body,
                                          max_retries=request.max_retries) as stream:
                async for event in stream:
                    if assembler.feed(event):
                        break
                return assembler.finish(stream.request_id)
        except BaseException as exc:  # cancellation included: report what arrived
            if isinstance(exc, ProviderError):
                exc.args = tuple(http.scrub(str(a)) for a in exc.args)
            if assembler is not None:
                _attach_partial(exc, assembler.partial())
            raise

    def close(self) -> None:
        """Close the HTTP connection pools (the async one, when it was used, is dropped; an
        event loop owns its sockets, so close it with :meth:`aclose` from that loop)."""
        self.http.close()

    async def aclose(self) -> None:
        """Close both connection pools."""
        self.http.close()
        if self._async is not None:
            await self._async.aclose()
            self._async = None

    def __enter__(self) -> HttpProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _attach_partial(exc: BaseException, message: Message | None) -> None:
    if message is not None and getattr(exc, "partial_message", None) is None:
        with contextlib.suppress(AttributeError):  # exceptions with __slots__
            exc.partial_message = message  # type: ignore[attr-defined]


# -- factories ---------------------------------------------------------------------------------


def build_http_provider(
    context: StrategyContext[ProviderOptions], translator: Translator,
    defaults: ProviderDefaults,
) -> HttpProvider:
    """Build an :class:`HttpProvider` from ``context.config.provider``; every setting it
    leaves unset comes from ``defaults`` (what the provider declares).

    ``context.options`` (:class:`~ctxfold.kernel.kinds.ProviderOptions`) may override the
    base URL, give the key directly, and supply test seams (``transport``, ``sleep``,
    ``clock``), timeouts, the retry budget and an ``on_request`` observer.
    """
    from ctxfold.transport.client import HttpClient, HttpSettings

    cfg = context.config.provider
    opts = context.options
    if not isinstance(opts, ProviderOptions):
        raise PluginError(f"provider {translator.name!r}: options must be ProviderOptions, "
                          f"got {type(opts).__name__}")
    settings = HttpSettings(
        base_url=opts.base_url or cfg.base_url or defaults.base_url,
        api_key_env=cfg.api_key_env or defaults.api_key_env,
        provider=translator.name,
        api_key=opts.api_key,
        idle_timeout=(min(120.0, cfg.timeout_seconds) if opts.idle_timeout is None
                      else opts.idle_timeout),
        total_timeout=cfg.timeout_seconds if opts.total_timeout is None else opts.total_timeout,
        max_retries=cfg.max_retries if opts.max_retries is None else opts.max_retries,
        headers=dict(defaults.headers),
        parse_overflow=defaults.parse_overflow,
        request_id_headers=defaults.request_id_headers,
        key_header=defaults.key_header,
        key_prefix=defaults.key_prefix,
    )
    seams: dict[str, Any] = {}
    if opts.sleep is not None:
        seams["sleep"] = opts.sleep
    if opts.clock is not None:
        seams["clock"] = opts.clock
    http = HttpClient(settings, transport=opts.transport, **seams)

    def async_http() -> AsyncHttpClient:
        from ctxfold.transport.aclient import AsyncHttpClient

        aseams: dict[str, Any] = {} if opts.clock is None else {"clock": opts.clock}
        if opts.sleep is not None:
            sleep = opts.sleep

            async def asleep(seconds: float) -> None:
                sleep(seconds)

            aseams["sleep"] = asleep
        return AsyncHttpClient(settings, transport=opts.async_transport, **aseams)

    return HttpProvider(
        name=translator.name,
        translator=translator,
        http=http,
        model=cfg.model or defaults.model,
        context_window=cfg.context_window or defaults.context_window,
        cache_ttl_minutes=cfg.cache_ttl_minutes or defaults.cache_ttl_minutes,
        on_request=opts.on_request,
        async_http=async_http,
    )
