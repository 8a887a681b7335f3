"""``ctxfold serve``: an OpenAI- and Anthropic-compatible proxy that gives any agent ctxfold.

An agent that speaks Chat Completions, Responses or Anthropic Messages to a configurable
base URL, and resends
its whole history every turn, is pointed at the proxy. The proxy reconciles that history
with the session's canonical transcript (:mod:`~ctxfold.serve.sessions`), sends the
provider ctxfold's view instead (:mod:`~ctxfold.serve.upstream`), answers the model's
``use_capability`` calls itself (:mod:`~ctxfold.serve.exchange`) and streams the answer back
in the client's wire format (:mod:`~ctxfold.serve.render_chat`,
:mod:`~ctxfold.serve.render_responses`, :mod:`~ctxfold.serve.render_anthropic`), whatever
the upstream's. Starlette and uvicorn (the ``serve`` extra) are
imported only by :mod:`~ctxfold.serve.app`, :mod:`~ctxfold.serve.guard` (the checks every
request passes first) and :mod:`~ctxfold.serve.server`.

::

    server = ProxyServer(build_proxy(config)).start()   # http://127.0.0.1:PORT/v1
    ...
    server.stop()

See ``docs/serve.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "GuardSettings",
    "Proxy",
    "ProxyServer",
    "ServeError",
    "ServeSettings",
    "SessionBusyError",
    "build_proxy",
    "create_app",
]

if TYPE_CHECKING:
    from ctxfold.serve.app import create_app
    from ctxfold.serve.errors import ServeError, SessionBusyError
    from ctxfold.serve.guard import GuardSettings
    from ctxfold.serve.proxy import Proxy, ServeSettings, build_proxy
    from ctxfold.serve.server import ProxyServer

_WHERE = {
    "Proxy": "proxy", "ServeSettings": "proxy", "build_proxy": "proxy", "create_app": "app",
    "ProxyServer": "server", "ServeError": "errors", "SessionBusyError": "errors",
    "GuardSettings": "guard",
}


def __getattr__(name: str) -> Any:
    # Lazy: ``import ctxfold.serve`` must not need starlette (the CLI checks for the extra).
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxfold.serve' has no attribute {name!r}")
    return getattr(importlib.import_module(f"ctxfold.serve.{module}"), name)
