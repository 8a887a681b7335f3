"""The proxy's HTTP face, a Starlette application: ``POST /v1/chat/completions``, ``POST
/v1/responses``, ``POST /v1/messages`` (streaming or not), ``POST
/v1/messages/count_tokens``, ``GET /v1/models`` and ``GET /healthz``.

Every answer carries ``X-Ctxfold-Session`` (the session the history now lives in) and,
when a model was asked, ``X-Ctxfold-Action`` / ``X-Ctxfold-Projection-Version`` (what
ctxfold's ``prepare()`` did). Failures are in the client's format: the provider's own status
and body when it refused (an Anthropic body turned OpenAI-shaped, or the reverse, when the
formats differ), else an error naming what failed — ``{"error": {...}}`` on the OpenAI
routes, ``{"type": "error", "error": {...}}`` on ``/v1/messages``. Nothing of a request's
headers is logged, stored or echoed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import attrs
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ctxfold.kernel.errors import CtxfoldError
from ctxfold.secrets import redact_text
from ctxfold.serve.client_request import Wire, parse_request
from ctxfold.serve.errors import (
    ServeError,
    error_answer,
    error_envelope,
    error_headers,
    in_wire,
    path_wire,
)
from ctxfold.serve.exchange import Exchange
from ctxfold.serve.guard import DECODED, Guard, GuardSettings, loads
from ctxfold.serve.proxy import REQUEST, Proxy, RequestContext

#: Request headers an Anthropic client sends that an Anthropic upstream must see (the API
#: version and the beta features the body relies on,
#: https://docs.anthropic.com/en/api/versioning, https://docs.anthropic.com/en/api/beta-headers).
ANTHROPIC_HEADERS = ("anthropic-version", "anthropic-beta")

log = logging.getLogger("ctxfold.serve")


class _Stream(StreamingResponse):
    """A streaming answer whose body is always closed — its ``finally`` releases the
    session — even when the client went away between two chunks."""

    def __init__(self, body: AsyncIterator[str], *, headers: dict[str, str],
                 done: Callable[[], None]) -> None:
        super().__init__(body, headers=headers, media_type="text/event-stream")
        self._body = body
        self._done = done

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._body.aclose()  # type: ignore[attr-defined]
            self._done()


def _state(exchange: Exchange) -> dict[str, str]:
    first = exchange.first
    if first is None:
        return {}
    action = next((a for a in exchange.actions if a != "none"), "none")
    return {"X-Ctxfold-Action": action,
            "X-Ctxfold-Projection-Version": str(first.projection_version)}


def _refused(payload: dict[str, Any], status: int, wire: str,
             headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(in_wire(status, payload, wire), status_code=status, headers=headers)


def _denied(wire: str) -> JSONResponse:
    return _refused(error_envelope(
        "missing or wrong proxy key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>' "
        "with the key this ctxfold serve was started with", kind="authentication_error",
        code="invalid_api_key"), 401, wire)


def _no_key(proxy: Proxy, wire: str) -> JSONResponse:
    variable = proxy.upstream.settings.api_key_env
    where = f"${variable} is not set where ctxfold serve runs" if variable else \
        "no key is configured"
    return _refused(error_envelope(
        f"no key for the upstream provider {proxy.upstream.name!r}: {where}, and the request "
        "sent no 'Authorization: Bearer <key>' or 'x-api-key: <key>' to forward; send the "
        "provider key, or set the variable before starting ctxfold serve",
        kind="authentication_error", code="missing_api_key"), 401, wire)


async def _body(request: Request) -> Any:
    body: Any = getattr(request.state, DECODED, None)  # the guard decoded it
    if body is None:
        try:
            body = loads(await request.body())
        except (ValueError, RecursionError):
            raise ServeError("the request body is not JSON (or nests too deeply)") from None
    return body


async def _answer(proxy: Proxy, wire: Wire, request: Request) -> Response:
    started = time.perf_counter()
    if not proxy.check_key(request.headers):
        return _denied(wire)
    forwarded = proxy.forwarded_key(request.headers)
    if forwarded is None and proxy.upstream.needs_key():
        return _no_key(proxy, wire)
    locks: AsyncExitStack | None = AsyncExitStack()
    session_id = ""
    exchange: Exchange | None = None

    def done(status: int) -> None:
        rounds = exchange.rounds if exchange else 0
        action = _state(exchange).get("X-Ctxfold-Action", "-") if exchange else "-"
        log.info("%s session=%s rounds=%d action=%s status=%d %.1fms", wire,
                 session_id or "-", rounds, action, status,
                 (time.perf_counter() - started) * 1000)

    try:
        client = parse_request(wire, await _body(request), proxy.recent)
        if wire == "messages":
            client = attrs.evolve(client, headers={
                name: request.headers[name] for name in ANTHROPIC_HEADERS
                if name in request.headers})
        session_id = proxy.conversation(request.headers, client)
        REQUEST.set(RequestContext(asyncio.get_running_loop(), forwarded, client.headers))
        assert locks is not None
        session_id, cm = await proxy.route(session_id, client, locks)
        exchange = Exchange(cm, client, proxy.upstream, forwarded=forwarded,
                            max_rounds=proxy.settings.max_rounds,
                            keepalive=proxy.settings.keepalive)
        headers = {"X-Ctxfold-Session": session_id}
        dropped = proxy.upstream.dropped(client)
        if dropped:
            headers["X-Ctxfold-Dropped-Tools"] = ", ".join(dropped)
            log.info("%s session=%s tools without a %s form, not offered upstream: %s",
                     wire, session_id, proxy.upstream.wire, ", ".join(dropped))
        if client.stream:
            await exchange.open_stream()
            stream, locks = exchange.stream(locks), None  # the stream releases the locks
            return _Stream(stream, headers={**headers, **_state(exchange)},
                           done=lambda: done(200))
        payload = await exchange.complete()
        done(200)
        return JSONResponse(payload, headers={**headers, **_state(exchange)})
    except CtxfoldError as exc:
        status, payload = error_answer(exc, forwarded)
        done(status)
        log.warning("%s session=%s refused: %s", wire, session_id or "-",
                    redact_text(str(exc), forwarded))
        headers = error_headers(exc)
        if session_id:
            headers["X-Ctxfold-Session"] = session_id
        return _refused(payload, status, wire, headers)
    finally:
        if locks is not None:
            await locks.aclose()


async def _unserved(request: Request, exc: Exception) -> Response:
    """A path or method the proxy does not serve, refused in the shape of the client the
    path belongs to: Anthropic's error body under ``/v1/messages``
    (https://docs.anthropic.com/en/api/errors), OpenAI's envelope elsewhere (its API answers
    an unknown URL with ``invalid_request_error``) — not Starlette's plain text, which an
    SDK cannot read."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    wire = path_wire(request.url.path)
    said = "method not allowed" if status == 405 else "no such route"
    payload = error_envelope(f"{said}: {request.method} {request.url.path} (ctxfold serve "
                             "answers POST /v1/chat/completions, /v1/responses, /v1/messages "
                             "and /v1/messages/count_tokens)")
    headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else None
    return _refused(payload, status, wire, headers)


def create_app(proxy: Proxy, guard: GuardSettings | None = None) -> Starlette:
    """The ASGI application of ``proxy``, behind its :class:`~ctxfold.serve.guard.Guard`."""

    async def chat(request: Request) -> Response:
        return await _answer(proxy, "chat", request)

    async def responses(request: Request) -> Response:
        return await _answer(proxy, "responses", request)

    async def messages(request: Request) -> Response:
        return await _answer(proxy, "messages", request)

    async def count_tokens(request: Request) -> Response:
        if not proxy.check_key(request.headers):
            return _denied("messages")
        try:
            client = parse_request("messages", await _body(request), proxy.recent)
            return JSONResponse({"input_tokens": await asyncio.to_thread(
                proxy.count_tokens, request.headers, client)})
        except CtxfoldError as exc:
            status, payload = error_answer(exc)
            return _refused(payload, status, "messages")

    async def models(request: Request) -> Response:
        if not proxy.check_key(request.headers):
            return _denied("chat")
        model = {"id": proxy.upstream.model, "object": "model", "created": 0,
                 "owned_by": f"ctxfold serve ({proxy.upstream.name})"}
        return JSONResponse({"object": "list", "data": [model]})

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "ok", "provider": proxy.upstream.name,
                             "wire": proxy.upstream.wire, "sessions_open": len(proxy.pool)})

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await proxy.upstream.aclose()

    routes = [Route(f"{prefix}/chat/completions", chat, methods=["POST"])
              for prefix in ("/v1", "")]
    routes += [Route(f"{prefix}/responses", responses, methods=["POST"])
               for prefix in ("/v1", "")]
    routes += [Route(f"{prefix}/messages", messages, methods=["POST"])
               for prefix in ("/v1", "")]
    routes += [Route(f"{prefix}/messages/count_tokens", count_tokens, methods=["POST"])
               for prefix in ("/v1", "")]
    routes += [Route("/v1/models", models, methods=["GET"]),
               Route("/healthz", healthz, methods=["GET"])]
    checks = Middleware(Guard, settings=guard or GuardSettings(), bound=proxy.settings.host)
    return Starlette(routes=routes, lifespan=lifespan, middleware=[checks],
                     exception_handlers={HTTPException: _unserved})
