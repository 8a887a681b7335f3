"""A proxy a web page cannot use, and bounded requests (issue 29, items 4 and 8): Host,
Origin and Content-Type checks, a body size limit, a JSON depth limit, slow clients timed
out, and no start that would let anyone spend the operator's provider key."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import attrs
import httpx
import pytest
from tests.serve.conftest import Served

from ctxfold import ConfigError, ReplySpec
from ctxfold.serve import GuardSettings, ProxyServer
from ctxfold.serve.guard import MIB, exposure_error, host_name

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def raw(served: Served, path: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(served.base + path, content=body, headers=headers, timeout=30)


def refused(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, (response.status_code, response.text)
    error = response.json()["error"]
    assert error["code"] == code and error["type"]
    return error["message"]


def nothing_happened(served: Served) -> None:
    assert served.emu.requests == [] and served.bodies == []
    assert not served.root.exists() or not any(served.root.iterdir())


def test_a_web_page_cannot_spend_the_operators_key(serve) -> None:
    # The provider key is configured (api_key), no proxy key: a page's simple cross-origin
    # POST (text/plain, no Authorization) and the same with a JSON content type are refused.
    served = serve(script=[ReplySpec(text="spent")])
    body = json.dumps(CHAT).encode()
    for content_type in ("text/plain", "application/json"):
        response = raw(served, "/chat/completions", body, **{
            "Content-Type": content_type, "Origin": "http://evil.example"})
        assert "Origin 'http://evil.example'" in refused(response, 403, "origin_not_allowed")
    for origin in ("null", "http://127.0.0.1:8787"):  # sandboxed frames; any page at all
        refused(raw(served, "/responses", body, **{"Content-Type": "application/json",
                                                   "Origin": origin}), 403,
                "origin_not_allowed")
    nothing_happened(served)
    # Without an Origin, a non-JSON body type is still refused (a form post, curl -d).
    for content_type in ("text/plain", "application/x-www-form-urlencoded", ""):
        refused(raw(served, "/chat/completions", body, **{"Content-Type": content_type}), 415,
                "unsupported_media_type")
    nothing_happened(served)
    ok = raw(served, "/chat/completions", body,
             **{"Content-Type": "application/json; charset=utf-8"})
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "spent"


def test_a_foreign_host_is_refused(serve) -> None:
    served = serve(script=[ReplySpec(text="one"), ReplySpec(text="two")])
    port = served.server.base_url.rsplit(":", 1)[1]
    for host in (f"evil.example:{port}", "evil.example", "127.0.0.1.evil.example",
                 f"10.0.0.1:{port}"):
        response = httpx.post(served.base + "/chat/completions", json=CHAT,
                              headers={"Host": host}, timeout=30)
        assert "DNS rebinding" in refused(response, 403, "host_not_allowed")
        health = httpx.get(served.server.base_url + "/healthz", headers={"Host": host})
        refused(health, 403, "host_not_allowed")
    nothing_happened(served)
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST.", "[::1]:80",
                 "api.localhost"):
        response = httpx.post(served.base + "/chat/completions", json=CHAT,
                              headers={"Host": host, "X-Ctxfold-Session": "s"}, timeout=30)
        if host.startswith(("127", "localhost")):
            assert response.status_code == 200
        else:
            assert response.status_code in (200, 409), response.text


def test_allowed_names_and_origins_pass(serve) -> None:
    served = serve(script=[ReplySpec(text="ok")],
                   guard=GuardSettings(allowed_hosts=("proxy.internal",),
                                       allowed_origins=("http://localhost:3000",)))
    response = httpx.post(served.base + "/chat/completions", json=CHAT, timeout=30,
                          headers={"Host": "proxy.internal:1",
                                   "Origin": "http://localhost:3000"})
    assert response.status_code == 200, response.text
    refused(httpx.post(served.base + "/chat/completions", json=CHAT, timeout=30,
                       headers={"Origin": "http://localhost:3001"}), 403, "origin_not_allowed")


def test_a_body_over_the_limit_gets_413_without_being_read(serve) -> None:
    served = serve(guard=GuardSettings(max_body=1 * MIB))
    big = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * 2 * MIB + b'"}]}'
    message = refused(raw(served, "/chat/completions", big,
                          **{"Content-Type": "application/json"}), 413, "request_too_large")
    assert f"at most {MIB} bytes" in message
    # Without a Content-Length (chunked), reading stops at the limit.
    def chunks() -> Any:
        for _ in range(64):
            yield b"x" * 65536
    response = httpx.post(served.base + "/chat/completions", content=chunks(),
                          headers={"Content-Type": "application/json"}, timeout=30)
    refused(response, 413, "request_too_large")
    nothing_happened(served)


def test_deeply_nested_json_gets_an_openai_shaped_400(serve) -> None:
    served = serve()
    for depth in (100, 100_000):
        body = b'{"model": "m", "messages": ' + b"[" * depth + b"]" * depth + b"}"
        response = raw(served, "/chat/completions", body, **{"Content-Type": "application/json"})
        assert "deeper than 64" in refused(response, 400, "nesting_too_deep")
    nothing_happened(served)


def test_slow_clients_are_cut_off(serve) -> None:
    served = serve(guard=GuardSettings(header_timeout=0.5, body_timeout=0.5))
    host, port = served.server.base_url.removeprefix("http://").rsplit(":", 1)
    # Headers that never end: the connection is closed.
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        began = time.monotonic()
        sock.sendall(b"X-Slow: 1\r\n")
        assert sock.recv(1024) == b""  # closed by the server
        assert time.monotonic() - began < 5
    # A body that never arrives: 408.
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        answer = b""
        while b'"request_timeout"' not in answer and (chunk := sock.recv(4096)):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408") and b'"request_timeout"' in answer
    nothing_happened(served)


def test_serving_that_would_expose_the_operators_key_is_refused(serve, monkeypatch) -> None:
    served = serve()
    assert served.proxy.upstream.has_key()
    monkeypatch.delenv("CTXFOLD_SERVE_KEY", raising=False)
    for guard in (GuardSettings(allowed_origins=("*",)), GuardSettings(allowed_hosts=("*",))):
        with pytest.raises(ConfigError, match="spend the provider key"):
            ProxyServer(served.proxy, guard=guard)
    served.proxy.settings = attrs.evolve(served.proxy.settings, host="0.0.0.0")
    with pytest.raises(ConfigError, match=r"bound to 0\.0\.0\.0"):
        ProxyServer(served.proxy)
    monkeypatch.setenv("CTXFOLD_SERVE_KEY", "proxy-secret")
    ProxyServer(served.proxy, guard=GuardSettings(allowed_origins=("*",)))  # a key: fine


@pytest.mark.parametrize(("bound", "provider", "proxy", "guard", "exposed"), [
    ("127.0.0.1", True, False, GuardSettings(), False),
    ("localhost", True, False, GuardSettings(), False),
    ("0.0.0.0", True, False, GuardSettings(), True),
    ("0.0.0.0", False, False, GuardSettings(), False),  # each client brings its own key
    ("0.0.0.0", True, True, GuardSettings(), False),
    ("127.0.0.1", True, False, GuardSettings(allowed_hosts=("*",)), True),
])
def test_exposure_rule(bound, provider, proxy, guard, exposed) -> None:
    said = exposure_error(bound=bound, provider_key=provider, proxy_key=proxy, settings=guard,
                          key_env="CTXFOLD_SERVE_KEY")
    assert (said is not None) == exposed


@pytest.mark.parametrize(("header", "name"), [
    ("LocalHost:8787", "localhost"), ("[::1]:8787", "::1"), ("::1", "::1"),
    ("example.com.", "example.com"), ("127.0.0.1", "127.0.0.1")])
def test_host_names(header, name) -> None:
    assert host_name(header) == name


def test_a_body_means_the_same_whichever_decoder_reads_it() -> None:
    """The proxy decodes bodies with orjson when it can and with json otherwise; what
    orjson refuses (a lone surrogate, a 100-digit integer, NaN) is read by json, alike."""
    import json

    from ctxfold.serve.guard import loads

    plain = b'{"model": "m", "messages": [{"role": "user", "content": "h\\u00e9llo"}]}'
    odd = b'{"a": "\\ud800", "big": 1' + b"0" * 100 + b', "n": NaN}'
    for body in (plain, odd):
        assert loads(body) == json.loads(body) or body is odd
    value = loads(odd)
    assert value["a"] == "\ud800" and value["big"] == 10 ** 100 and value["n"] != value["n"]
