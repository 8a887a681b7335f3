"""Running the proxy: uvicorn serving :func:`~ctxfold.serve.app.create_app` in a background
thread, so ``ctxfold serve``, tests and scripts start and stop it the same way."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ctxfold.kernel.errors import ConfigError
from ctxfold.secrets import remember_secret
from ctxfold.serve.app import create_app
from ctxfold.serve.guard import GuardSettings, exposure_error
from ctxfold.serve.proxy import Proxy


def _header_timed(seconds: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol closing a connection whose request headers are not complete
    ``seconds`` after it opened or after its previous answer (uvicorn has no such timeout:
    a client sending a header byte now and then would hold its connection for ever)."""

    class HeaderTimed(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            if self.conn.their_state is h11.IDLE:
                self._header_timer = self.loop.call_later(seconds, self._late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _late(self) -> None:
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderTimed


class ProxyServer:
    """``ProxyServer(proxy).start()`` binds ``proxy.settings.host:port`` (port 0: an
    ephemeral one) and serves until :meth:`stop`. ``guard``: the request checks and limits
    (``docs/serve.md``, "What a web page and a careless client can do"); a proxy that would
    let others spend the provider key configured for its upstream is refused
    (:class:`~ctxfold.ConfigError`). ``log_config`` is uvicorn's (``None``: leave logging as
    the host configured it)."""

    def __init__(self, proxy: Proxy, *, guard: GuardSettings | None = None,
                 log_config: dict[str, Any] | None = None, access_log: bool = False) -> None:
        guard = guard or GuardSettings()
        remember_secret(os.environ.get(proxy.settings.key_env))  # masked in every text
        exposed = exposure_error(
            bound=proxy.settings.host, provider_key=proxy.upstream.has_key(),
            proxy_key=bool(os.environ.get(proxy.settings.key_env)), settings=guard,
            key_env=proxy.settings.key_env)
        if exposed:
            raise ConfigError(exposed)
        self.proxy = proxy
        config = uvicorn.Config(create_app(proxy, guard), host=proxy.settings.host,
                                port=proxy.settings.port, log_config=log_config,
                                access_log=access_log, lifespan="on",
                                timeout_graceful_shutdown=2,
                                timeout_keep_alive=max(1, round(guard.idle_timeout)),
                                http=_header_timed(guard.header_timeout))
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 60.0) -> ProxyServer:
        """Start serving; raise :class:`~ctxfold.ConfigError` when the address is taken."""
        self._thread = threading.Thread(target=self._server.run, name="ctxfold-serve",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        s = self.proxy.settings
        while not self._server.started:
            if not self._thread.is_alive():
                raise ConfigError(f"ctxfold serve cannot listen on {s.host}:{s.port} (in use "
                                  "or not an address of this machine); choose another --port "
                                  "or 0 for an ephemeral one")
            if time.monotonic() > deadline:
                self._server.should_exit = True
                raise ConfigError(f"ctxfold serve did not start on {s.host}:{s.port} within "
                                  f"{timeout:g}s; the machine may be overloaded, try again")
            time.sleep(0.01)
        return self

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` of the running server (clients append ``/v1``)."""
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        """Stop serving (open streams get two seconds to finish) and close the provider."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.proxy.close()

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
