"""Failures through the proxy reach the client in its own shape with a status that says
who failed: the provider's own status and body when it refused, 502 for a reply that was
malformed or dropped, 504 for a timeout; ``Retry-After`` kept; no upstream address or
operator hint in what the client sees; no retry storm; nothing of a failed answer that a
retry would trip over."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from tests.serve.conftest import BASH

from ctxfold import Fault, ReplySpec

HELLO = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


def test_a_malformed_reply_to_a_plain_request_is_a_502(serve) -> None:
    """It was an HTTP 200 with an error body: the OpenAI SDK returned a response without
    choices and the client crashed on it."""
    served = serve(faults=[Fault("malformed", at=0)])
    response = served.post("/chat/completions", HELLO)
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["type"] == "upstream_error" and "not its protocol" in error["message"]
    assert served.emu.base_url not in response.text and "base_url" not in response.text
    client = openai.OpenAI(base_url=served.base, api_key="k", max_retries=0)
    served.emu.inject(Fault("malformed"))
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(**HELLO)


def test_a_dropped_reply_is_a_502(serve) -> None:
    served = serve(faults=[Fault("drop", at=0)])
    dropped = served.post("/chat/completions", HELLO)
    assert dropped.status_code == 502
    assert "connection to the upstream provider" in dropped.json()["error"]["message"]


def test_a_rate_limit_keeps_retry_after_and_the_providers_body(serve) -> None:
    served = serve(faults=[Fault("rate_limit", at=0, retry_after=7)])
    response = served.post("/chat/completions", HELLO)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    assert "error" in response.json()
    assert len(served.emu.requests) == 1  # the proxy did not retry: the client will


def test_errors_name_no_upstream_address_or_operator_setting(serve) -> None:
    served = serve(faults=[Fault("overloaded", at=0), Fault("malformed", at=1)])
    for _ in range(2):
        response = served.post("/chat/completions", HELLO)
        assert response.status_code in (502, 503)
        for leak in (served.emu.base_url, "127.0.0.1", "[provider]", "api_key_env",
                     "DEEPSEEK_API_KEY", "base_url"):
            assert leak not in response.text, (leak, response.text)


def test_the_openai_sdk_retry_is_one_upstream_attempt_each(serve) -> None:
    """Each client retry used to become up to three upstream attempts."""
    served = serve(faults=[Fault("overloaded", at=0, count=3)], max_retries=2)
    client = openai.OpenAI(base_url=served.base, api_key="k", max_retries=2)
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(**HELLO)
    assert len(served.emu.requests) == 3  # 1 + the SDK's 2 retries, no more


def test_a_retry_after_a_failed_capability_round_continues_the_same_session(serve) -> None:
    """An answer that failed after a ``use_capability`` round left that round in the
    transcript; the client's retry then forked."""
    capability = ReplySpec(text="", tool_calls=(openai_call("k1", "use_capability",
                                                            {"action": "list"}),))
    served = serve(script=[ReplySpec(text="", tool_calls=(openai_call(
        "c1", "bash", {"command": "cat"}),)), capability, ReplySpec(text="ok")],
        faults=[Fault("overloaded", at=2)])
    history: list[dict[str, Any]] = [{"role": "user", "content": "read it"}]
    first = served.post("/chat/completions", {"model": "m", "messages": history,
                                               "tools": [BASH]})
    session = first.headers["x-ctxfold-session"]
    history += [first.json()["choices"][0]["message"],
                {"role": "tool", "tool_call_id": "c1", "content": "y" * 40_000}]
    failed = served.post("/chat/completions", {"model": "m", "messages": history,
                                                "tools": [BASH]})
    assert failed.status_code == 503
    retried = served.post("/chat/completions", {"model": "m", "messages": history,
                                                 "tools": [BASH]})
    assert retried.status_code == 200, retried.text
    assert retried.headers["x-ctxfold-session"] == session
    assert retried.json()["choices"][0]["message"]["content"] == "ok"


def openai_call(call_id: str, name: str, arguments: dict[str, Any]) -> Any:
    import ctxfold

    return ctxfold.ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


def test_a_stalled_upstream_stream_keeps_the_client_connection_alive(serve) -> None:
    served = serve(faults=[Fault("stall", at=0, interval=0.1, stall_cap=1.0)], keepalive=0.2)
    lines: list[str] = []
    with httpx.stream("POST", served.base + "/chat/completions",
                      json={**HELLO, "stream": True}, timeout=30) as response:
        assert response.status_code == 200
        lines = list(response.iter_lines())
    assert lines.count(": keep-alive") >= 2
    errors = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    assert errors and "error" in errors[-1]  # the stall ended: an error event, not silence


def test_a_message_no_request_could_carry_is_refused_before_it_is_written(serve) -> None:
    """It was written, and then the session refused every request that kept it."""
    served = serve(script=[ReplySpec(text="ok"), ReplySpec(text="still here")], window=4000)
    history: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    first = served.post("/chat/completions", {"model": "m", "messages": history})
    session = first.headers["x-ctxfold-session"]
    before = served.transcript_bytes(session)
    history.append(first.json()["choices"][0]["message"])
    huge = [*history, {"role": "user", "content": "word " * 20_000}]
    refused = served.post("/chat/completions", {"model": "m", "messages": huge})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "context_length_exceeded"
    assert "nothing was written" in refused.json()["error"]["message"]
    assert served.transcript_bytes(session) == before
    history.append({"role": "user", "content": "a short one then"})
    again = served.post("/chat/completions", {"model": "m", "messages": history})
    assert again.status_code == 200 and again.headers["x-ctxfold-session"] == session
