"""Running the proxy: uvicorn serving :func:`~ctxfold.serve.app.create_app` in a background
thread, so ``ctxfold serve``, tests and scripts start and stop it the same way."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

from ctxfold.kernel.errors import ConfigError
from ctxfold.serve.app import create_app
from ctxfold.serve.proxy import Proxy


class ProxyServer:
    """``ProxyServer(proxy).start()`` binds ``proxy.settings.host:port`` (port 0: an
    ephemeral one) and serves until :meth:`stop`. ``log_config`` is uvicorn's (``None``:
    leave logging as the host configured it)."""

    def __init__(self, proxy: Proxy, *, log_config: dict[str, Any] | None = None,
                 access_log: bool = False) -> None:
        self.proxy = proxy
        config = uvicorn.Config(create_app(proxy), host=proxy.settings.host,
                                port=proxy.settings.port, log_config=log_config,
                                access_log=access_log, lifespan="on",
                                timeout_graceful_shutdown=2)
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
