"""Auth through ``ctxfold serve``: the client's key forwarded when none is configured, an
optional proxy key, and no key, header or token ever stored, logged or echoed."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.emulator.conftest import CharTokens
from tests.serve.conftest import BASH, HeaderEmulator, call, quarter

from ctxfold import AuthenticationError, Fault, ReplySpec
from ctxfold.serve.errors import error_answer

SECRET = "sk-client-7f3a9c1e5b2d4f6a8c0e"


def every_file(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_the_clients_key_is_forwarded_and_never_written_anywhere(
        serve, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # httpx, httpcore, uvicorn, ctxfold.serve: everything
    emu = HeaderEmulator("deepseek", counter=CharTokens(), log_requests=tmp_path / "up.jsonl",
                         script=[call("c1"), ReplySpec(text="done"),
                                 ReplySpec(text="after the fault")],
                         faults=[Fault("rate_limit", at=2)])
    served = serve(emulator=emu, api_key=None)
    auth = {"Authorization": f"Bearer {SECRET}"}
    history: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    answers: list[Any] = []
    first = served.post("/chat/completions", {"model": "m", "messages": history,
                                               "tools": [BASH]}, **auth)
    answers.append(first)
    history += [first.json()["choices"][0]["message"],
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    response, events = served.stream("/chat/completions", {"model": "m", "messages": history,
                                                           "tools": [BASH]}, **auth)
    answers.append(response)
    history += [{"role": "assistant", "content": "done"}, {"role": "user", "content": "more"}]
    refused = served.post("/chat/completions", {"model": "m", "messages": history}, **auth)
    hostile = served.post("/chat/completions", {"model": "m", "messages": history},
                          **auth, **{"X-Ctxfold-Session": f"../{SECRET}"})
    nokey = served.post("/chat/completions", {"model": "m", "messages": history})
    assert first.status_code == 200 and response.status_code == 200
    assert refused.status_code == 429 and hostile.status_code == 400
    assert nokey.status_code == 401
    assert "Authorization" in nokey.json()["error"]["message"]
    # The upstream got exactly the client's key, every time one was sent.
    assert emu.keys[:3] == [f"Bearer {SECRET}"] * 3
    served.server.stop()
    served.emu.stop()
    # Nothing the proxy (or the emulator's log) wrote holds the key, nor any answer.
    files = every_file(tmp_path)
    assert any(name.endswith(".jsonl") and "sessions" in name for name in files)
    assert [name for name, data in files.items() if SECRET.encode() in data] == []
    assert SECRET not in caplog.text
    for answer in (first, refused, hostile, nokey):
        assert SECRET not in answer.text
    for answer in (*answers, refused, hostile, nokey):
        assert SECRET not in json.dumps(dict(answer.headers))
    assert SECRET not in json.dumps(events)


def test_an_echoed_key_in_a_provider_error_is_masked() -> None:
    exc = AuthenticationError("HTTP 401", status=401, body=json.dumps({"error": {
        "message": f"Incorrect API key provided: {SECRET}", "type": "invalid_request_error",
        "code": "invalid_api_key"}}))
    status, body = error_answer(exc, SECRET)
    assert status == 401 and SECRET not in json.dumps(body)
    assert body["error"]["code"] == "invalid_api_key"


def test_a_proxy_key_is_required_when_set_and_never_forwarded(
        serve, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXFOLD_SERVE_KEY", "proxy-key-123")
    emu = HeaderEmulator("deepseek", counter=CharTokens())
    served = serve(emulator=emu, api_key="upstream-key")
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    missing = served.post("/chat/completions", body)
    wrong = served.post("/chat/completions", body, Authorization="Bearer guess")
    models = served.server.base_url + "/v1/models"
    assert httpx.get(models, timeout=10).status_code == 401
    right = served.post("/chat/completions", body, Authorization="Bearer proxy-key-123")
    assert (missing.status_code, wrong.status_code, right.status_code) == (401, 401, 200)
    assert "guess" not in wrong.text and wrong.json()["error"]["code"] == "invalid_api_key"
    assert emu.keys == ["Bearer upstream-key"]  # the proxy key never goes upstream
    listed = httpx.get(models, headers={"Authorization": "Bearer proxy-key-123"}, timeout=10)
    assert listed.json()["data"][0]["id"]


def test_checkpoint_summaries_use_the_forwarded_key(serve) -> None:
    """In forwarded-key mode the summary call read the provider's (unset) key variable, so
    no checkpoint was ever installed and every request past the ceiling was a 400."""
    emu = HeaderEmulator("deepseek", counter=quarter,
                         script=[call(f"c{i}") for i in range(30)])
    served = serve(emulator=emu, api_key=None, window=4000)
    auth = {"Authorization": f"Bearer {SECRET}"}
    history: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    actions = []
    for i in range(12):
        response = served.post("/chat/completions", {"model": "m", "messages": history,
                                                      "tools": [BASH]}, **auth)
        assert response.status_code == 200, response.text
        actions.append(response.headers["x-ctxfold-action"])
        answer = response.json()["choices"][0]["message"]
        history += [answer, {"role": "tool", "tool_call_id": answer["tool_calls"][0]["id"],
                             "content": f"output {i} " * 180}]
    assert "summary" in actions
    summaries = [i for i, record in enumerate(emu.requests)
                 if "[ctxfold:summary-request]" in json.dumps(record.body)]
    assert summaries and all(emu.keys[i] == f"Bearer {SECRET}" for i in summaries)
