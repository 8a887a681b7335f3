"""Context-overflow bodies per profile, worded as each provider words them, so the parser of
design §7.2 reads them (docs/providers.md, "Testing against the emulator")."""

from __future__ import annotations

import json
import re

import httpx

from ctxfold import Emulator

DEEPSEEK_RE = re.compile(
    r"^This model's maximum context length is (\d+) tokens\. However, you requested (\d+) "
    r"tokens \((\d+) in the messages, (\d+) in the completion\)\. Please reduce the length of "
    r"the messages or completion\.$"
)


def test_deepseek_overflow_body(chars) -> None:
    with Emulator("deepseek", window=2000, counter=chars) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        body = {"messages": [{"role": "user", "content": "z" * 1500}], "max_tokens": 1000}
        r = client.post("/chat/completions", json=body)
        assert r.status_code == 400
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["code"] == "invalid_request_error"
        assert error["param"] is None
        window, requested, prompt, completion = map(int, DEEPSEEK_RE.match(
            error["message"]).groups())
        assert (window, completion) == (2000, 1000)
        assert requested == prompt + completion and prompt == emu.requests[0].prompt_tokens
        assert emu.requests[0].status == 400 and emu.requests[0].usage is None
        # the same input fits once the completion budget is small enough
        body["max_tokens"] = 100
        assert client.post("/chat/completions", json=body).status_code == 200


def test_deepseek_default_budget_is_reserved(chars) -> None:
    with Emulator("deepseek", window=70_000, counter=chars) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        messages = [{"role": "user", "content": "z" * 10_000}]
        # thinking is on by default: 64K reserved → 10K + 64K > 70K
        r = client.post("/chat/completions", json={"messages": messages})
        assert r.status_code == 400 and "65536 in the completion" in r.json()["error"]["message"]
        r = client.post("/chat/completions",
                        json={"messages": messages, "thinking": {"type": "disabled"}})
        assert r.status_code == 200
        assert len(emu.requests) == 2


def test_mimo_overflow_body(chars) -> None:
    with Emulator("mimo", window=1000, counter=chars) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        r = client.post("/chat/completions", json={
            "messages": [{"role": "user", "content": "z" * 900}], "max_completion_tokens": 200})
        assert r.status_code == 400
        body = r.json()
        assert body["code"] == "400" and body["type"] == "" and body["param"] == "messages"
        assert body["message"].startswith("Param Incorrect")
        assert "maximum context length is 1000 tokens" in body["message"]
        assert "(942 in the messages, 200 in the completion)" in body["message"]
        assert emu.requests[0].status == 400


def test_responses_overflow_non_streaming_and_streaming(chars) -> None:
    with Emulator("responses", window=500, counter=chars) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        body = {"input": "q" * 600}
        r = client.post("/responses", json=body)
        assert r.status_code == 400
        assert r.json()["error"]["code"] == "context_length_exceeded"
        assert r.json()["error"]["param"] == "input"
        with client.stream("POST", "/responses", json={**body, "stream": True}) as s:
            assert s.status_code == 200
            data = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ")]
        assert [d["type"] for d in data] == ["response.created", "response.in_progress", "error"]
        assert data[-1]["sequence_number"] == 2
        assert data[-1]["error"]["code"] == "context_length_exceeded"
        assert [rec.status for rec in emu.requests] == [400, 400]
