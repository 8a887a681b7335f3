"""The proxy's state: the configuration, the upstream, the open sessions; and routing, which
turns a request's history into the session it continues (:mod:`ctxfold.serve.sessions`)."""

from __future__ import annotations

import asyncio
import hmac
import os
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack

import attrs

from ctxfold.capabilities.tool import USE_CAPABILITY_TOOL
from ctxfold.config.load import LoadedConfig
from ctxfold.engine.manager import ContextManager
from ctxfold.engine.opening import create_provider, open_session
from ctxfold.kernel.config import Config
from ctxfold.kernel.contracts import Provider
from ctxfold.kernel.errors import MessageError
from ctxfold.kernel.types import ToolSchema
from ctxfold.serve.client_request import ClientRequest
from ctxfold.serve.errors import ServeError
from ctxfold.serve.pool import SessionPool
from ctxfold.serve.sessions import derive_session_id, reconcile, session_from_header
from ctxfold.serve.upstream import Upstream

#: How many forks one request may walk through (a fork of a fork of …) before giving up.
MAX_FORK_DEPTH = 16


@attrs.frozen(kw_only=True)
class ServeSettings:
    """How the proxy runs. ``window`` is the window ctxfold maintains (default: the
    provider's); ``key_env`` names the variable holding the optional proxy key; a request
    waits at most ``lock_wait`` seconds for its session; one answer makes at most
    ``max_rounds`` upstream calls (``use_capability`` rounds included)."""

    host: str = "127.0.0.1"
    port: int = 8787
    window: int | None = None
    key_env: str = "CTXFOLD_SERVE_KEY"
    lock_wait: float = 30.0
    max_rounds: int = 4
    capacity: int = 256


class Proxy:
    """Everything one ``ctxfold serve`` holds. Build it with :func:`build_proxy`."""

    def __init__(self, config: Config, provider: Provider, settings: ServeSettings, *,
                 store_path: str | None = None,
                 on_request: Callable[[bytes], None] | None = None) -> None:
        self.config = config
        self.provider = provider
        self.settings = settings
        self.store_path = store_path
        self.upstream = Upstream(provider, on_request=on_request)
        self.pool = SessionPool(self._open, lock_wait=settings.lock_wait,
                                capacity=settings.capacity)

    def _open(self, session_id: str, tools: Sequence[ToolSchema],
              create: bool) -> ContextManager:
        return open_session(session_id, config=self.config, tools=tools, create=create,
                            provider=self.provider, window=self.settings.window,
                            store_path=self.store_path)

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

    def session_for(self, header: str | None, request: ClientRequest) -> str:
        """The session the request names, or the one derived from it."""
        if header:
            return session_from_header(header)
        return derive_session_id(request.model, request.history)

    async def route(self, session_id: str, request: ClientRequest,
                    stack: AsyncExitStack) -> tuple[str, ContextManager]:
        """Lock the session (on ``stack``), reconcile the request's history with its
        transcript and append what is new — in a fork when the history diverged. Returns
        the session that holds the history now."""
        tools = (*request.tools, USE_CAPABILITY_TOOL)
        locked: set[str] = set()

        async def lock(name: str) -> None:
            if name not in locked:
                await stack.enter_async_context(self.pool.locked(name))
                locked.add(name)

        await lock(session_id)
        for _ in range(MAX_FORK_DEPTH):
            cm = await asyncio.to_thread(self.pool.get, session_id, tools)
            plan = await asyncio.to_thread(reconcile, session_id, cm.canonical,
                                           request.history)
            if plan.fork_id:
                await lock(plan.fork_id)
                if await asyncio.to_thread(self.pool.exists, cm, plan.fork_id):
                    session_id = plan.fork_id  # seen before: reconcile with the fork
                    continue
                await asyncio.to_thread(cm.fork, plan.fork_id, plan.covered)
                session_id = plan.fork_id
                cm = await asyncio.to_thread(self.pool.get, session_id, tools)
            if plan.new:
                try:
                    await asyncio.to_thread(cm.append, *plan.new)
                except MessageError as exc:
                    raise ServeError(f"session {session_id!r}: {exc}") from None
            return session_id, cm
        raise ServeError(f"session {session_id!r}: the history diverges from more than "
                         f"{MAX_FORK_DEPTH} forks in a row; start a new session")

    def close(self) -> None:
        """Close the provider (and the in-process emulator it may own)."""
        close = getattr(self.provider, "close", None)
        if callable(close):
            close()


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
