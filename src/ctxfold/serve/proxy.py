"""The proxy's state: the configuration, the upstream, the open sessions; and routing, which
turns a request's history into the session it continues (:mod:`ctxfold.serve.sessions`)."""

from __future__ import annotations

import asyncio
import hmac
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from contextvars import ContextVar

import attrs

from ctxfold.config.load import LoadedConfig
from ctxfold.engine.manager import ContextManager
from ctxfold.engine.opening import create_provider, open_session
from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import Estimator, Provider, Store
from ctxfold.kernel.errors import SummarizerError
from ctxfold.kernel.kinds import ESTIMATOR, SIDECAR_FORMAT, STORE, SUMMARIZER, StoreOptions
from ctxfold.kernel.registry import Registry
from ctxfold.kernel.types import (
    RequestShape,
    SummaryRequest,
    SummaryResult,
    ToolSchema,
)
from ctxfold.serve.client_request import ClientRequest, RecentHistories, estimated_tools
from ctxfold.serve.pool import SessionPool
from ctxfold.serve.routing import Router
from ctxfold.serve.sessions import (
    SESSION_HEADER,
    conversation_id,
    conversation_session,
    derive_session_id,
    session_from_header,
)
from ctxfold.serve.upstream import Upstream


@attrs.frozen(kw_only=True)
class ServeSettings:
    """How the proxy runs. ``window`` is the window ctxfold maintains (default: the
    provider's); ``key_env`` names the variable holding the optional proxy key; a request
    waits at most ``lock_wait`` seconds for a fork another request is creating under the
    same name; one answer makes at most
    ``max_rounds`` upstream calls (``use_capability`` rounds included). A request whose
    history continues a session another request holds waits ``fork_after`` seconds, then
    continues in a fork of it (two conversations that share their opening never block each
    other). ``upstream_retries``: how often the proxy itself retries an upstream call that
    failed with a retryable status (default none: the client retries the 429 or 5xx it gets,
    ``Retry-After`` included, so attempts never multiply). A stream that has had nothing to
    send for ``keepalive`` seconds sends an SSE comment. At most ``capacity`` sessions stay
    open, holding about ``max_open_bytes`` of message text among them (least recently used
    closed first; a closed session reopens from its store)."""

    host: str = "127.0.0.1"
    port: int = 8787
    window: int | None = None
    key_env: str = "CTXFOLD_SERVE_KEY"
    lock_wait: float = 30.0
    fork_after: float = 2.0
    max_rounds: int = 4
    capacity: int = 256
    max_open_bytes: int = 512 * 1024 * 1024
    upstream_retries: int = 0
    keepalive: float = 15.0


@attrs.frozen
class RequestContext:
    """What a checkpoint summary needs of the request that asked for it: the server's event
    loop, the forwarded key, and the client's headers an upstream of its format must see
    (Anthropic's ``anthropic-beta``: tools the summary carries may need it)."""

    loop: asyncio.AbstractEventLoop
    forwarded: str | None
    headers: Mapping[str, str] = attrs.field(factory=dict)


#: The running request's context, for the summaries it may need.
REQUEST: ContextVar[RequestContext | None] = ContextVar("ctxfold_serve_request", default=None)


class ProxySummaries:
    """Checkpoint summaries by the upstream model with the key of the request that needs
    one (the forwarded key when no key is configured; never stored), so a proxy that only
    forwards its clients' keys still installs checkpoints. Used when the configured
    summarizer is one that calls the provider (the default ``llm``)."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream

    def _request(self) -> RequestContext:
        context = REQUEST.get()
        if context is None:
            raise SummarizerError("a proxy checkpoint summary was asked for outside a "
                                  "request; nothing was installed")
        return context

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """From a worker thread of the request: the call runs on the server's loop."""
        context = self._request()
        return asyncio.run_coroutine_threadsafe(self.upstream.summarize(
            request, context.forwarded, context.headers), context.loop).result()

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        context = self._request()
        return await self.upstream.summarize(request, context.forwarded, context.headers)


class Proxy:
    """Everything one ``ctxfold serve`` holds. Build it with :func:`build_proxy`."""

    def __init__(self, config: Config, provider: Provider, settings: ServeSettings, *,
                 store_path: str | None = None,
                 on_request: Callable[[bytes], None] | None = None) -> None:
        self.config = config
        self.provider = provider
        self.settings = settings
        self.store_path = store_path
        self.upstream = Upstream(provider, retries=settings.upstream_retries,
                                 on_request=on_request, effort=config.agent.effort)
        self.registry = Registry.from_config(config)
        resolved = self.registry.resolve(config)
        self.store: Store = self.registry.create(STORE, resolved.store.name, config=resolved,
                                                 options=StoreOptions(path=store_path))
        calls_provider = self.registry.get(SUMMARIZER,
                                           resolved.summarizer.name).calls_provider
        self.summarizer = ProxySummaries(self.upstream) if calls_provider else None
        self.pool = SessionPool(self._open, lock_wait=settings.lock_wait,
                                capacity=settings.capacity, max_bytes=settings.max_open_bytes)
        self.recent = RecentHistories()
        self.router = Router(self.pool, self.store, self.registry.create(
            SIDECAR_FORMAT, resolved.store.sidecar_format, config=resolved),
            lock_wait=settings.lock_wait, fork_after=settings.fork_after)

    def _open(self, session_id: str, tools: Sequence[ToolSchema],
              create: bool) -> ContextManager:
        return open_session(session_id, config=self.config, tools=tools, create=create,
                            provider=self.provider, window=self.settings.window,
                            registry=self.registry, store=self.store,
                            summarizer=self.summarizer)

    def check_key(self, headers: Mapping[str, str]) -> bool:
        """Whether the request may pass: no proxy key is set, or it sent that key (as
        ``Authorization: Bearer`` or as ``x-api-key``, see :func:`presented_keys`)."""
        key = os.environ.get(self.settings.key_env, "")
        if not key:
            return True
        return any(hmac.compare_digest(token.encode(), key.encode())
                   for token in presented_keys(headers))

    def forwarded_key(self, headers: Mapping[str, str]) -> str | None:
        """The client's key to use upstream: only when no proxy key is set (the client's
        header then is its provider key); the upstream uses it only without a key of its
        own."""
        if os.environ.get(self.settings.key_env):
            return None
        return next(iter(presented_keys(headers)), None)

    def conversation(self, headers: Mapping[str, str], request: ClientRequest) -> str:
        """The session that names the request's conversation (see
        :mod:`ctxfold.serve.sessions`): the ``X-Ctxfold-Session`` header, else the client's
        own conversation id, else one derived from the opening of the history."""
        header = headers.get(SESSION_HEADER)
        if header:
            return session_from_header(header)
        named = conversation_id(headers, request.fields)
        if named is not None:
            return conversation_session(named)
        return derive_session_id(request.model, request.history)

    def count_tokens(self, headers: Mapping[str, str], request: ClientRequest) -> int:
        """The input tokens of what the proxy would send for ``request`` now (its history
        after the checkpoint that covers it, its tools), estimated with the estimator of
        the session it continues, else with the configured one (worker thread; nothing is
        routed or appended)."""
        view, cm = self.router.would_send(self.conversation(headers, request), request)
        estimator = cm.estimator if cm is not None else self._estimator()
        return estimator.estimate(RequestShape(view, estimated_tools(request)))

    def _estimator(self) -> Estimator:
        resolved = self.registry.resolve(self.config)
        return self.registry.create(ESTIMATOR, resolved.estimator.name, config=resolved)

    async def route(self, family_id: str, request: ClientRequest,
                    stack: AsyncExitStack) -> tuple[str, ContextManager]:
        """The session the request continues, locked on ``stack``, its new messages
        appended (:meth:`Router.route`)."""
        return await self.router.route(family_id, request, stack)

    def close(self) -> None:
        """Close the provider (and the in-process emulator it may own)."""
        close = getattr(self.provider, "close", None)
        if callable(close):
            close()


def presented_keys(headers: Mapping[str, str]) -> list[str]:
    """The keys a request presents: ``Authorization: Bearer …`` (OpenAI clients; Claude Code
    with ``ANTHROPIC_AUTH_TOKEN``), then ``x-api-key`` (Anthropic clients with an API key,
    https://docs.anthropic.com/en/api/overview#authentication)."""
    keys = [bearer(headers.get("authorization")), (headers.get("x-api-key") or "").strip()]
    return [k for k in keys if k]


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer …`` header."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def build_proxy(config: Config | LoadedConfig | None = None, *,
                provider: Provider | None = None, settings: ServeSettings | None = None,
                store_path: str | None = None,
                on_request: Callable[[bytes], None] | None = None) -> Proxy:
    """A proxy over ``provider`` (default: the one ``[provider] name`` selects, the
    loopback emulator unless configured), storing sessions in ``[store] path`` (or
    ``store_path``)."""
    if isinstance(config, LoadedConfig):
        config = config.config
    config = config or Config()
    provider = provider or create_provider(config)
    return Proxy(config, provider, settings or ServeSettings(), store_path=store_path,
                 on_request=on_request)
