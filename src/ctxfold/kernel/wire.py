"""Providers = the kernel HTTP client + a translator (SPEC §5).

A provider plugin supplies a :class:`Translator`: it turns a :class:`ChatRequest` into the
provider's request body, and the provider's answer (one JSON document, or a stream of SSE
events fed to a :class:`StreamAssembler`) into a :class:`ChatResponse`. Everything else —
the HTTP client, auth, retries, timeouts, typed errors, cancellation — is the kernel's
:class:`HttpProvider`. A new provider plugin is therefore one translator and one factory
calling :func:`build_http_provider`; see ``docs/providers.md``.

Partial results: :meth:`HttpProvider.complete` returns a complete :class:`ChatResponse` or
raises. If a stream broke (dropped connection, malformed chunk, timeout, KeyboardInterrupt)
after some output arrived, the exception carries ``partial_message`` (a :class:`Message` with
``partial=True``); read it with :func:`partial_message_of` and record it as partial, or not at
all. The response is always closed.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from ctxfold.kernel.errors import (
    AuthenticationError,
    ContextLimitError,
    ProviderConnectionError,
    ProviderError,
    ProviderRequestError,
    ProviderResponseError,
    RateLimitError,
    ServerError,
)
from ctxfold.kernel.strategies import ChatRequest, ChatResponse, StrategyContext
from ctxfold.kernel.types import Message

if TYPE_CHECKING:
    from ctxfold.kernel.http import HttpClient, SseEvent

#: ``max_output_tokens`` ladder used when the request says 0 (auto): MiMo and Responses.
OUTPUT_LADDER = {"plain": 16_384, "reasoning": 32_768, "deep": 65_536}


def ladder_output_tokens(request: ChatRequest) -> int:
    """An explicit ``max_output_tokens`` wins; else 16K plain (effort ``none``), 32K
    reasoning (low/medium), 64K for high/max effort (SPEC §5); clipped to the window's
    ``output_room`` when known."""
    if request.max_output_tokens > 0:
        value = request.max_output_tokens
    elif request.effort == "none":
        value = OUTPUT_LADDER["plain"]
    elif request.effort in ("high", "max"):
        value = OUTPUT_LADDER["deep"]
    else:
        value = OUTPUT_LADDER["reasoning"]
    return min(value, request.output_room) if request.output_room > 0 else value


class StreamAssembler(Protocol):
    """Accumulates one streamed response. Raise a ProviderError for in-stream errors."""

    def feed(self, event: SseEvent) -> bool:
        """Consume one event; return True when the stream is complete (stop reading)."""
        ...

    def partial(self) -> Message | None:
        """What has arrived so far as a ``partial=True`` assistant message (None if nothing)."""
        ...

    def finish(self, request_id: str) -> ChatResponse:
        """The complete response after the stream ended; raise ProviderConnectionError if the
        stream ended before its terminal event."""
        ...


class Translator(Protocol):
    """The only thing a provider plugin writes: request body out, response in."""

    name: str
    #: Path appended to the base URL, e.g. ``/chat/completions``.
    path: str

    def build_body(self, request: ChatRequest, *, model: str) -> dict[str, Any]:
        """The JSON body for ``request`` (``model`` already resolved). Deterministic: the
        same request gives the same bytes, and messages come before anything that varies."""
        ...

    def parse_response(self, data: Any, request_id: str) -> ChatResponse:
        """Parse a non-streaming JSON answer; raise ProviderResponseError when malformed."""
        ...

    def new_stream(self) -> StreamAssembler:
        """A fresh assembler for one streamed response."""
        ...


def partial_message_of(exc: BaseException) -> Message | None:
    """The partially received assistant message attached to ``exc``, if any."""
    value = getattr(exc, "partial_message", None)
    return value if isinstance(value, Message) else None


def serialize_body(body: Mapping[str, Any]) -> bytes:
    """The exact bytes sent for ``body`` (compact JSON, UTF-8, key order preserved)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


class HttpProvider:
    """A :class:`ctxfold.kernel.strategies.Provider` over the kernel HTTP client."""

    supports_native_compaction = False

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
    ) -> None:
        self.name = name
        self.translator = translator
        self.http = http
        self.model = model
        self.context_window = context_window
        self.cache_ttl_minutes = cache_ttl_minutes
        self.on_request = on_request

    def body(self, request: ChatRequest) -> dict[str, Any]:
        """The request body that :meth:`complete` would send (for tests and tooling)."""
        return self.translator.build_body(request, model=request.model or self.model)

    def serialize(self, request: ChatRequest) -> bytes:
        """The exact request bytes (invariant 4 compares these between turns)."""
        return serialize_body(self.body(request))

    def complete(self, request: ChatRequest) -> ChatResponse:
        """Send ``request``; return the full response or raise a ProviderError (or the
        interrupting exception) carrying ``partial_message`` when output was cut off."""
        body = self.body(request)
        if self.on_request is not None:
            self.on_request(body)
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

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self.http.close()

    def __enter__(self) -> HttpProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _attach_partial(exc: BaseException, message: Message | None) -> None:
    if message is not None and getattr(exc, "partial_message", None) is None:
        with contextlib.suppress(AttributeError):  # exceptions with __slots__
            exc.partial_message = message  # type: ignore[attr-defined]


def stream_cut(provider: str, what: str) -> ProviderConnectionError:
    """The error for a stream that ended before its terminal event."""
    return ProviderConnectionError(
        f"{provider}: the response stream ended before {what}; the connection was dropped or "
        "the server gave up — the partial output is on exc.partial_message; retry the request"
    )


def bad_payload(provider: str, where: str, data: str) -> ProviderResponseError:
    """The error for an event or body that cannot be parsed."""
    excerpt = data[:120] + ("…" if len(data) > 120 else "")
    return ProviderResponseError(
        f"{provider}: could not parse {where}: {excerpt!r}; the endpoint does not speak the "
        f"{provider} protocol — check [provider] name and base_url"
    )


def load_json(provider: str, where: str, data: str) -> Any:
    """``json.loads`` that raises :func:`bad_payload` instead of ValueError."""
    try:
        return json.loads(data)
    except ValueError:
        raise bad_payload(provider, where, data) from None


# -- factories ---------------------------------------------------------------------------------


@attrs.frozen
class ProviderDefaults:
    """Per-provider defaults used when ``[provider]`` leaves a value empty/zero."""

    base_url: str
    api_key_env: str
    model: str
    cache_ttl_minutes: int
    headers: Mapping[str, str] = attrs.field(factory=dict)


def build_http_provider(
    context: StrategyContext, translator: Translator, defaults: ProviderDefaults
) -> HttpProvider:
    """Build an :class:`HttpProvider` from ``context.config.provider``.

    ``context.options`` may override: ``transport`` (an httpx transport), ``base_url``,
    ``api_key`` (used instead of the env var), ``sleep``/``clock`` (test seams),
    ``idle_timeout``, ``total_timeout``, ``max_retries``, ``on_request``.
    """
    from ctxfold.kernel.http import HttpClient, HttpSettings  # httpx loads only when used

    cfg = context.config.provider
    opts = context.options
    settings = HttpSettings(
        base_url=str(opts.get("base_url") or cfg.base_url or defaults.base_url),
        api_key_env=cfg.api_key_env or defaults.api_key_env,
        provider=translator.name,
        api_key=opts.get("api_key"),
        idle_timeout=float(opts.get("idle_timeout", min(120.0, cfg.timeout_seconds))),
        total_timeout=float(opts.get("total_timeout", cfg.timeout_seconds)),
        max_retries=int(opts.get("max_retries", cfg.max_retries)),
        headers=dict(defaults.headers),
    )
    seams: dict[str, Any] = {k: opts[k] for k in ("sleep", "clock") if k in opts}
    http = HttpClient(settings, transport=opts.get("transport"), **seams)
    return HttpProvider(
        name=translator.name,
        translator=translator,
        http=http,
        model=cfg.model or defaults.model,
        context_window=cfg.context_window,
        cache_ttl_minutes=cfg.cache_ttl_minutes or defaults.cache_ttl_minutes,
        on_request=opts.get("on_request"),
    )


def error_from_payload(provider: str, payload: Any, where: str) -> ProviderError:
    """The typed error for an error object reported inside a 200 response or stream
    (OpenAI ``error`` event, ``response.failed``, MiMo's in-stream ``{"error": ...}``)."""
    from ctxfold.kernel.overflow import parse_context_limit

    text = json.dumps(payload, ensure_ascii=False)
    overflow = parse_context_limit(400, text)
    if overflow is not None:
        return ContextLimitError(f"{provider}: {where}: {overflow}", window=overflow.window,
                                 prompt=overflow.prompt, completion=overflow.completion)
    err = payload.get("error", payload) if isinstance(payload, Mapping) else payload
    err = err if isinstance(err, Mapping) else {"message": str(err)}
    code = " ".join(str(err.get(k) or "") for k in ("code", "type")).lower()
    said = str(err.get("message") or code or text)[:300]
    msg = f"{provider}: {where}: {said!r}"
    if "rate" in code or "quota" in code:
        return RateLimitError(msg + "; rate limit reached, wait and retry", status=429)
    if any(w in code for w in ("auth", "key", "permission")):
        return AuthenticationError(msg + "; check the API key", status=401)
    if any(w in code for w in ("server", "overload", "internal", "unavailable")):
        return ServerError(msg + "; the provider failed, retry later", status=None)
    return ProviderRequestError(msg + "; the provider rejected the request, check [provider] "
                                "model and the request settings", status=None)
