"""The proxy's state: the configuration, the upstream, the open sessions; and routing, which
turns a request's history into the session it continues (:mod:`ctxfold.serve.sessions`)."""

from __future__ import annotations

import asyncio
import hmac
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from contextvars import ContextVar

import attrs

from ctxfold.capabilities.bounding import bound_new_message
from ctxfold.config.load import LoadedConfig
from ctxfold.engine.manager import ContextManager
from ctxfold.engine.opening import create_provider, open_session
from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import Provider, Store
from ctxfold.kernel.errors import MessageError, SummarizerError
from ctxfold.kernel.kinds import STORE, SUMMARIZER, StoreOptions
from ctxfold.kernel.registry import Registry
from ctxfold.kernel.types import (
    Message,
    RequestShape,
    SummaryRequest,
    SummaryResult,
    ToolSchema,
)
from ctxfold.serve.client_request import ClientRequest, estimated_tools
from ctxfold.serve.errors import ServeError, SessionBusyError
from ctxfold.serve.pool import SessionPool
from ctxfold.serve.sessions import (
    SESSION_HEADER,
    ClientView,
    Match,
    chain_of,
    conversation_id,
    conversation_session,
    derive_session_id,
    fork_id,
    is_fork_of,
    key_digest,
    match,
    session_from_header,
)
from ctxfold.serve.upstream import Upstream

#: How often one request re-plans when the branch it chose changed under it.
MAX_REPLANS = 8
#: How many conversations' branch indexes are kept in memory (least recently used out).
MAX_FAMILIES = 4096


@attrs.define
class Family:
    """One conversation: its sessions (the one named by its id, and its forks), each as
    the client sees it. ``listed``: the forks in the store have been indexed."""

    name: str
    views: dict[str, ClientView] = attrs.Factory(dict)
    listed: bool = False


@attrs.frozen(kw_only=True)
class ServeSettings:
    """How the proxy runs. ``window`` is the window ctxfold maintains (default: the
    provider's); ``key_env`` names the variable holding the optional proxy key; a request
    waits at most ``lock_wait`` seconds for its session; one answer makes at most
    ``max_rounds`` upstream calls (``use_capability`` rounds included). A request whose
    history continues a session another request holds waits ``fork_after`` seconds, then
    continues in a fork of it (two conversations that share their opening never block each
    other). ``upstream_retries``: how often the proxy itself retries an upstream call that
    failed with a retryable status (default none: the client retries the 429 or 5xx it gets,
    ``Retry-After`` included, so attempts never multiply). A stream that has had nothing to
    send for ``keepalive`` seconds sends an SSE comment."""

    host: str = "127.0.0.1"
    port: int = 8787
    window: int | None = None
    key_env: str = "CTXFOLD_SERVE_KEY"
    lock_wait: float = 30.0
    fork_after: float = 2.0
    max_rounds: int = 4
    capacity: int = 256
    upstream_retries: int = 0
    keepalive: float = 15.0


#: The running request's event loop and forwarded key, for the summaries it may need.
REQUEST: ContextVar[tuple[asyncio.AbstractEventLoop, str | None] | None] = ContextVar(
    "ctxfold_serve_request", default=None)


class ProxySummaries:
    """Checkpoint summaries by the upstream model with the key of the request that needs
    one (the forwarded key when no key is configured; never stored), so a proxy that only
    forwards its clients' keys still installs checkpoints. Used when the configured
    summarizer is one that calls the provider (the default ``llm``)."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream

    def _request(self) -> tuple[asyncio.AbstractEventLoop, str | None]:
        context = REQUEST.get()
        if context is None:
            raise SummarizerError("a proxy checkpoint summary was asked for outside a "
                                  "request; nothing was installed")
        return context

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """From a worker thread of the request: the call runs on the server's loop."""
        loop, key = self._request()
        return asyncio.run_coroutine_threadsafe(self.upstream.summarize(request, key),
                                                loop).result()

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        _loop, key = self._request()
        return await self.upstream.summarize(request, key)


class Held:
    """The session locks one request holds (on its exit stack), each taken once."""

    def __init__(self, pool: SessionPool, stack: AsyncExitStack) -> None:
        self.pool = pool
        self.stack = stack
        self.names: set[str] = set()

    async def lock(self, session_id: str, wait: float | None = None) -> None:
        if session_id not in self.names:
            await self.stack.enter_async_context(self.pool.locked(session_id, wait))
            self.names.add(session_id)


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
                                 on_request=on_request)
        self.registry = Registry.from_config(config)
        self.store: Store = self.registry.create(
            STORE, config.store.name, config=self.registry.resolve(config),
            options=StoreOptions(path=store_path))
        calls_provider = self.registry.get(
            SUMMARIZER, self.registry.resolve(config).summarizer.name).calls_provider
        self.summarizer = ProxySummaries(self.upstream) if calls_provider else None
        self.pool = SessionPool(self._open, lock_wait=settings.lock_wait,
                                capacity=settings.capacity)
        self.families: OrderedDict[str, Family] = OrderedDict()

    def _open(self, session_id: str, tools: Sequence[ToolSchema],
              create: bool) -> ContextManager:
        return open_session(session_id, config=self.config, tools=tools, create=create,
                            provider=self.provider, window=self.settings.window,
                            registry=self.registry, store=self.store,
                            summarizer=self.summarizer)

    def check_key(self, authorization: str | None) -> bool:
        """Whether the request may pass: no proxy key is set, or it sent that key."""
        key = os.environ.get(self.settings.key_env, "")
        if not key:
            return True
        token = bearer(authorization) or ""
        return hmac.compare_digest(token.encode(), key.encode())

    def forwarded_key(self, authorization: str | None) -> str | None:
        """The client's key to use upstream: only when no proxy key is set (the client's
        header then is its provider key); the upstream uses it only without a key of its
        own."""
        if os.environ.get(self.settings.key_env):
            return None
        return bearer(authorization)

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

    def _family(self, name: str) -> Family:
        family = self.families.pop(name, None) or Family(name)
        self.families[name] = family  # most recently used last
        while len(self.families) > MAX_FAMILIES:
            del self.families[next(iter(self.families))]
        return family

    def _index(self, family: Family, session_id: str, tools: Sequence[ToolSchema]) -> None:
        """Read a session of the family into its index (worker thread)."""
        cm = self.pool.get(session_id, tools, create=False)
        family.views[session_id] = ClientView(cm.messages_from(0))

    def _list(self, family: Family, tools: Sequence[ToolSchema]) -> None:
        """Index the family's sessions in the store not indexed yet (worker thread)."""
        for session_id in self.store.list_sessions():
            if session_id not in family.views and (
                    session_id == family.name or is_fork_of(family.name, session_id)):
                self._index(family, session_id, tools)
        family.listed = True

    @staticmethod
    def _best(family: Family, chain: Sequence[bytes]) -> tuple[str, Match] | None:
        """The session the history continues (the longest one it extends), else the one
        it shares the longest prefix with."""
        best: tuple[str, Match] | None = None
        for session_id, view in family.views.items():
            found = match(view, chain)
            if best is None or (found.extends, found.matched) > (best[1].extends,
                                                                  best[1].matched):
                best = (session_id, found)
        return best

    async def route(self, family_id: str, request: ClientRequest,
                    stack: AsyncExitStack) -> tuple[str, ContextManager]:
        """Lock the session the request's history continues (on ``stack``) and append
        what is new — in a fork when the history diverges from every session of its
        conversation, or continues one that another request holds. Returns the session
        that holds the history now."""
        history, tools = request.history, estimated_tools(request)
        digests = await asyncio.to_thread(lambda: [key_digest(m) for m in history])
        chain = chain_of(digests)
        family = self._family(family_id)
        held = Held(self.pool, stack)
        for _ in range(MAX_REPLANS):
            best = self._best(family, chain)
            if (best is None or not best[1].extends) and not family.listed:
                await asyncio.to_thread(self._list, family, tools)
                best = self._best(family, chain)
            if best is None:  # a new conversation: its first session
                best = (family.name, Match(matched=0, covered=0, extends=True))
            session_id, found = best
            if found.extends:
                wait = self.settings.lock_wait if session_id == family.name and \
                    session_id not in family.views else self.settings.fork_after
                try:
                    await held.lock(session_id, wait)
                except SessionBusyError:  # held by another request: continue beside it
                    return await self._fork(family, session_id, found, request, digests,
                                            chain, held)
                cm = await asyncio.to_thread(self._refresh, family, session_id, tools)
                found = match(family.views[session_id], chain)
                if found.extends:
                    await self._append(family, session_id, cm, history[found.matched:], held)
                    return session_id, cm
                continue  # it changed while we waited: plan again
            return await self._fork(family, session_id, found, request, digests, chain,
                                    held)
        raise ServeError(f"session {family_id!r}: the conversation kept changing under "
                         f"this request ({MAX_REPLANS} attempts); retry it", status=409,
                         kind="conflict", code="session_busy")

    def _refresh(self, family: Family, session_id: str,
                 tools: Sequence[ToolSchema]) -> ContextManager:
        """Open the session (its lock held) and bring its index entry up to date."""
        cm = self.pool.get(session_id, tools)
        view = family.views.get(session_id)
        if cm.sync() or view is None or view.length > cm.message_count:
            view = family.views[session_id] = ClientView(cm.messages_from(0))
        else:
            view.extend(cm.messages_from(view.length))
        return cm

    async def _append(self, family: Family, session_id: str, cm: ContextManager,
                      new: Sequence[Message], held: Held) -> None:
        """Append the request's new messages; when the request lets the session go, its
        index entry reads the answer too (before the lock is released)."""
        held.stack.callback(self._settled, family, session_id, cm)
        if new:
            try:
                await asyncio.to_thread(_admit, cm, new)
                await asyncio.to_thread(cm.append, *new)
            except MessageError as exc:
                raise ServeError(f"session {session_id!r}: {exc}") from None
        self._settled(family, session_id, cm)

    @staticmethod
    def _settled(family: Family, session_id: str, cm: ContextManager) -> None:
        view = family.views.get(session_id)
        if view is not None and view.length <= cm.message_count:
            view.extend(cm.messages_from(view.length))

    async def _fork(self, family: Family, source: str, found: Match, request: ClientRequest,
                    digests: Sequence[bytes], chain: Sequence[bytes],
                    held: Held) -> tuple[str, ContextManager]:
        """Continue the history in a fork of ``source`` holding its first
        ``found.covered`` messages (the source's checkpoint comes along when it covers no
        more). The fork's name depends only on the shared prefix and the first differing
        message, so every replica finds the same one; a name another history took gets
        the next attempt number."""
        history, tools = request.history, estimated_tools(request)
        prefix = chain[found.matched - 1] if found.matched else b""
        differing = digests[found.matched] if found.matched < len(digests) else None
        attempt = 0
        while True:
            target = fork_id(family.name, prefix, differing, attempt)
            attempt += 1
            if target == source:
                continue
            await held.lock(target)
            source_cm = await asyncio.to_thread(self.pool.get, source, tools)
            if target not in family.views and await asyncio.to_thread(
                    self.store.exists, target):
                await asyncio.to_thread(self._index, family, target, tools)
            if target in family.views:
                cm = await asyncio.to_thread(self._refresh, family, target, tools)
                found_here = match(family.views[target], chain)
                if found_here.extends:  # this history's own fork (another replica made it)
                    await self._append(family, target, cm, history[found_here.matched:], held)
                    return target, cm
                continue  # taken by another history: the next name (its lock stays held)
            await asyncio.to_thread(source_cm.fork, target, found.covered)
            cm = await asyncio.to_thread(self.pool.get, target, tools, create=False)
            family.views[target] = ClientView(cm.messages_from(0))
            await self._append(family, target, cm, history[found.matched:], held)
            return target, cm

    def close(self) -> None:
        """Close the provider (and the in-process emulator it may own)."""
        close = getattr(self.provider, "close", None)
        if callable(close):
            close()


def _admit(cm: ContextManager, new: Sequence[Message]) -> None:
    """Refuse, before anything is written, a new message no request could ever carry: one
    that alone is at or above the window's hard ceiling (tool results count bounded, as
    they are stored). Appended, it would make every later request of the session fail."""
    for i, message in enumerate(new):
        if len(message.text) * 4 < cm.hard_ceiling:  # at most 4 tokens per character
            continue
        stored = bound_new_message(message)
        tokens = cm.estimator.estimate(RequestShape([stored], ()))
        if tokens >= cm.hard_ceiling:
            raise ServeError(
                f"a new message of the request ({stored.role}, the {i + 1}. of "
                f"{len(new)}) holds about {tokens} tokens, at or above what the window of "
                f"{cm.window} tokens can carry ({cm.hard_ceiling}); nothing was written — "
                "send it shorter or in parts", code="context_length_exceeded")


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
