"""The proxy's first check of every request, before the application reads it: a web page
cannot use the proxy, and a request is bounded (the threat model: ``docs/serve.md``, "What a
web page and a careless client can do").

* ``Host`` must name the bound address, a loopback name (``localhost``, ``*.localhost``,
  127.0.0.0/8, ``::1``), any IP literal when the proxy is bound to every address, or a name
  the operator allowed (``--allow-host``) — a DNS-rebinding page sends its own name;
* a request carrying ``Origin`` (a browser's cross-origin or same-origin fetch) is refused
  unless the operator allowed that origin (``--allow-origin``) — a web page cannot post;
* the ``POST`` endpoints take ``Content-Type: application/json`` only — the content types a
  page may send without a preflight (``text/plain``, forms) are refused;
* the body is read up to :attr:`GuardSettings.max_body` bytes (413 past it, the rest never
  read) within :attr:`GuardSettings.body_timeout` seconds (408), and JSON nested deeper
  than :attr:`GuardSettings.max_depth` is a 400.

Every refusal is an OpenAI error envelope (an Anthropic error body on the ``/messages``
routes). :func:`exposure_error` says when serving would let anyone spend the operator's
provider key.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

try:  # the serve extra brings it; without it, json alone
    import orjson
except ImportError:  # pragma: no cover - the serve extra installs it
    orjson = None  # type: ignore[assignment]

from ctxfold.serve.errors import error_envelope, in_wire, path_wire

#: Allow-list entry that turns a check off (``--allow-host '*'``, ``--allow-origin '*'``).
ANY = "*"
MIB = 1024 * 1024
#: Bodies larger than this are checked for depth off the event loop.
_INLINE_CHECK = MIB


@attrs.frozen(kw_only=True)
class GuardSettings:
    """What :class:`Guard` lets through. ``allowed_hosts`` / ``allowed_origins``: names
    and origins allowed besides the defaults (``"*"`` turns that check off); ``max_body``
    in bytes; ``max_depth`` of JSON nesting; ``body_timeout`` for the whole body to
    arrive; ``header_timeout`` for a request's headers and ``idle_timeout`` for an idle
    keep-alive connection (both applied by :class:`~ctxfold.serve.server.ProxyServer`)."""

    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    max_body: int = 32 * MIB
    max_depth: int = 64
    body_timeout: float = 60.0
    header_timeout: float = 10.0
    idle_timeout: float = 5.0

    @property
    def host_check(self) -> bool:
        return ANY not in self.allowed_hosts

    @property
    def origin_check(self) -> bool:
        return ANY not in self.allowed_origins


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) is this machine only."""
    host = host.strip("[]").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def host_name(header: str) -> str:
    """The name of a ``Host`` header value: port, IPv6 brackets and a trailing dot removed,
    lower-cased."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    name = header.rpartition(":")[0] if header.count(":") == 1 else header
    return name.rstrip(".")


def exposure_error(*, bound: str, provider_key: bool, proxy_key: bool,
                   settings: GuardSettings, key_env: str) -> str | None:
    """Why serving would let others spend the operator's provider key, or ``None``: a
    provider key is configured and no proxy key is set, and the proxy is not bound to
    loopback with the Host and Origin checks on."""
    if not provider_key or proxy_key:
        return None
    if is_loopback(bound) and settings.host_check and settings.origin_check:
        return None
    why = (f"it is bound to {bound}, which other machines can reach" if not is_loopback(bound)
           else "the " + " and ".join(
               name for name, on in (("Host", settings.host_check),
                                     ("Origin", settings.origin_check)) if not on)
           + " check is off, so a web page could reach it")
    return (f"ctxfold serve would let anyone spend the provider key configured for the "
            f"upstream: {why}; set a proxy key in ${key_env} (clients then send "
            "'Authorization: Bearer <proxy key>'), or serve on 127.0.0.1 with the checks on")


@attrs.frozen
class Refusal:
    """A request the guard refuses: its status and OpenAI error envelope (answered in the
    shape of the client the path belongs to: :func:`~ctxfold.serve.errors.path_wire`)."""

    status: int
    payload: dict[str, Any]

    def response(self, path: str) -> JSONResponse:
        return JSONResponse(in_wire(self.status, self.payload, path_wire(path)),
                            status_code=self.status)


def _refusal(status: int, code: str, message: str) -> Refusal:
    kind = {408: "timeout", 413: "invalid_request_error"}.get(status, "invalid_request_error")
    return Refusal(status, error_envelope(message, kind=kind, code=code))


def depth_exceeds(value: Any, limit: int) -> bool:
    """Whether decoded JSON ``value`` nests containers deeper than ``limit`` (no recursion)."""
    stack = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    return False


#: Where the guard leaves a body it decoded (``scope["state"]``, Starlette's
#: ``request.state``), so the application does not decode it a second time.
DECODED = "ctxfold_json"
_NOT_JSON = object()


def loads(body: bytes) -> Any:
    """A request body decoded: with ``orjson`` (the serve extra; a third of the time on the
    large bodies agents resend every turn) when it takes it, else — and for whatever it
    refuses that ``json`` reads: lone surrogates, integers past 64 bits, NaN — with
    ``json``, so a body means the same either way."""
    if orjson is not None:
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    return json.loads(body)


def _decoded(body: bytes, limit: int) -> tuple[bool, Any]:
    """``(too deep, the decoded body)``; the body is :data:`_NOT_JSON` when it is not JSON
    (the application then says so)."""
    try:
        value = loads(body)
    except RecursionError:  # deeper than the decoder itself goes
        return True, _NOT_JSON
    except ValueError:
        return False, _NOT_JSON
    return depth_exceeds(value, limit), value


class Guard:
    """ASGI middleware applying :class:`GuardSettings` to a proxy bound to ``bound``."""

    def __init__(self, app: ASGIApp, *, settings: GuardSettings, bound: str) -> None:
        self.app = app
        self.settings = settings
        self.bound = host_name(bound)

    def _host_allowed(self, header: str | None) -> bool:
        if not self.settings.host_check or header is None:  # HTTP/1.0: no browser sends that
            return True
        name = host_name(header)
        if name == self.bound or is_loopback(name):
            return True
        if name in (host.lower().rstrip(".") for host in self.settings.allowed_hosts):
            return True
        bound = _ip(self.bound)
        return bound is not None and bound.is_unspecified and _ip(name) is not None

    def _origin_allowed(self, origin: str) -> bool:
        return not self.settings.origin_check or origin.lower().rstrip("/") in (
            allowed.lower().rstrip("/") for allowed in self.settings.allowed_origins)

    def _check(self, scope: Scope, headers: Headers) -> Refusal | None:
        host = headers.get("host")
        if not self._host_allowed(host):
            return _refusal(403, "host_not_allowed", (
                f"Host {host!r:.80} is not an address this ctxfold serve answers to (a page "
                "on another site may be trying to reach it through DNS rebinding); use "
                "127.0.0.1 or localhost, or start it with --allow-host NAME"))
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin):
            return _refusal(403, "origin_not_allowed", (
                f"requests from a web page (Origin {origin!r:.80}) are refused: a page must "
                "not spend this proxy's key; start ctxfold serve with --allow-origin ORIGIN "
                "to allow that page"))
        if scope["method"] == "POST":
            media = headers.get("content-type", "").partition(";")[0].strip().lower()
            if media != "application/json":
                return _refusal(415, "unsupported_media_type", (
                    f"Content-Type {media or '(none)'!r:.60} is not accepted: send the JSON "
                    "body with 'Content-Type: application/json'"))
            length = headers.get("content-length", "")
            if length.isdigit() and int(length) > self.settings.max_body:
                return self._too_large(int(length))
        return None

    def _too_large(self, size: int | None) -> Refusal:
        """413 for a body of ``size`` bytes (``None``: more than the limit, not all read)."""
        said = "larger than that" if size is None else f"{size} bytes"
        return _refusal(413, "request_too_large", (
            f"this ctxfold serve accepts request bodies of at most {self.settings.max_body} "
            f"bytes (--max-body-mib) and this one is {said}"))

    async def _read(self, receive: Receive) -> bytes | Refusal | None:
        """The whole body, a refusal, or ``None`` when the client went away."""
        chunks: list[bytes] = []
        size = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.body_timeout
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                return _refusal(408, "request_timeout", (
                    f"the request body did not arrive within {self.settings.body_timeout:g}s"))
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.settings.max_body:
                return self._too_large(None)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._check(scope, Headers(scope=scope))
        if refusal is None and scope["method"] == "POST":
            read = await self._read(receive)
            if read is None:
                return
            if isinstance(read, Refusal):
                refusal = read
            else:
                deep, value = await asyncio.to_thread(_decoded, read, self.settings.max_depth) \
                    if len(read) > _INLINE_CHECK else _decoded(read, self.settings.max_depth)
                if not deep and value is not _NOT_JSON:
                    scope.setdefault("state", {})[DECODED] = value
                if deep:
                    refusal = _refusal(400, "nesting_too_deep", (
                        f"the request body nests JSON deeper than {self.settings.max_depth} "
                        "levels"))
                else:
                    receive = _replay(read, receive)
        if refusal is not None:
            await refusal.response(scope.get("path", ""))(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Callable[[], Awaitable[Message]]:
    """A ``receive`` that gives the body already read, then the client's own events (a
    disconnect while streaming)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
