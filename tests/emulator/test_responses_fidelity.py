"""The emulator as a faithful upstream: streamed call arguments sent once, the response
object's echoed fields, ``previous_response_id``, ``GET /v1/models``, DeepSeek's output
budget field, and ``--log-requests``."""

from __future__ import annotations

import argparse
import json
import threading
from typing import Any

import httpx
import pytest

from ctxfold import Emulator, ReplySpec, ToolCall
from ctxfold.cli.emulate_cmd import run

TOOL = {"type": "function", "name": "bash", "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}


def events(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


def test_streamed_function_call_arguments_arrive_once(chars, clock) -> None:
    reply = ReplySpec(text="", tool_calls=(
        ToolCall(id="c1", name="bash", arguments='{"command": "ls -la /tmp && echo done"}'),))
    with Emulator("responses", counter=chars, clock=clock, script=[reply]) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client, \
            client.stream("POST", "/responses", json={"input": "go", "tools": [TOOL],
                                                      "stream": True}) as r:
        data = events(r)
    added = [d for d in data if d["type"] == "response.output_item.added"]
    assert [d["item"]["arguments"] for d in added] == [""]
    deltas = "".join(d["delta"] for d in data
                     if d["type"] == "response.function_call_arguments.delta")
    done = next(d for d in data if d["type"] == "response.output_item.done")
    # What a client accumulates (added + deltas) is exactly the final arguments.
    assert added[0]["item"]["arguments"] + deltas == done["item"]["arguments"] \
        == reply.tool_calls[0].arguments


def test_the_response_object_repeats_the_request_fields(chars, clock) -> None:
    body = {"input": "hi", "instructions": "be brief", "tools": [TOOL],
            "tool_choice": "required", "parallel_tool_calls": False, "store": False,
            "text": {"format": {"type": "text"}, "verbosity": "low"}}
    with Emulator("responses", counter=chars, clock=clock) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        plain = client.post("/responses", json=body).json()
        with client.stream("POST", "/responses", json={**body, "stream": True}) as r:
            data = events(r)
        defaults = client.post("/responses", json={"input": "hi"}).json()
    created, final = data[0]["response"], data[-1]["response"]
    for response in (plain, created, final):
        assert response["tools"] == [TOOL]
        assert (response["tool_choice"], response["parallel_tool_calls"]) == ("required", False)
        assert (response["instructions"], response["store"]) == ("be brief", False)
        assert response["text"] == body["text"]
    assert (defaults["tools"], defaults["tool_choice"], defaults["parallel_tool_calls"],
            defaults["instructions"], defaults["store"], defaults["text"]) == (
        [], "auto", True, None, True, {"format": {"type": "text"}})


def test_previous_response_id_continues_a_stored_response(chars, clock) -> None:
    with Emulator("responses", counter=chars, clock=clock,
                  script=[ReplySpec(text="first answer")]) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        first = client.post("/responses", json={"input": "one", "instructions": "sys"}).json()
        second = client.post("/responses", json={
            "input": [{"role": "user", "content": "two"}],
            "previous_response_id": first["id"]})
        assert second.status_code == 200, second.text
        assert second.json()["previous_response_id"] == first["id"]
        # The stored input and output come first; the old instructions are not carried over.
        whole = client.post("/responses", json={"input": [
            {"role": "user", "content": "one"}, {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "two"}]}).json()
        assert second.json()["usage"]["input_tokens"] == whole["usage"]["input_tokens"]
        unstored = client.post("/responses", json={"input": "x", "store": False}).json()
        missing = client.post("/responses", json={"input": "y",
                                                   "previous_response_id": unstored["id"]})
        conversation = client.post("/responses", json={"input": "z",
                                                        "conversation": "conv_1"})
    assert missing.status_code == 400
    assert missing.json()["error"]["code"] == "previous_response_not_found"
    assert unstored["id"] in missing.json()["error"]["message"]
    assert conversation.status_code == 400
    assert conversation.json()["error"]["param"] == "conversation"


@pytest.mark.parametrize("profile", ["deepseek", "responses"])
def test_models_lists_the_profiles_model(profile: str, chars) -> None:
    with Emulator(profile, counter=chars) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        listed = client.get("/v1/models").json()
        missing = client.get("/v1/nothing")
    assert listed["object"] == "list"
    assert [m["id"] for m in listed["data"]] == [emu.profile.model]
    assert missing.status_code == 404 and "GET /v1/models" in missing.json()["error"]["message"]


def test_deepseek_honours_max_completion_tokens(chars) -> None:
    with Emulator("deepseek", counter=chars, window=1000) as emu, \
            httpx.Client(base_url=emu.base_url, timeout=10) as client:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        assert client.post("/chat/completions", json=body).status_code == 400  # 8K default
        small = client.post("/chat/completions", json={**body, "max_completion_tokens": 500})
        both = client.post("/chat/completions", json={**body, "max_completion_tokens": 500,
                                                        "max_tokens": 5000})
        bad = client.post("/chat/completions", json={**body, "max_completion_tokens": "x"})
    assert small.status_code == 200, small.text
    assert both.status_code == 400  # max_tokens, DeepSeek's own field, wins
    assert bad.status_code == 400 and "max_completion_tokens" in bad.text


def test_log_requests_writes_masked_json_lines(tmp_path, capsys) -> None:
    log = tmp_path / "logs" / "requests.jsonl"
    args = argparse.Namespace(port=0, profile="deepseek", window=None, script=None, fault=[],
                              log_requests=str(log))
    ready, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=run, args=(args,), kwargs={"ready": ready, "stop": stop})
    thread.start()
    secret = "sk-live-0123456789abcdef"
    try:
        assert ready.wait(10)
        base_url = capsys.readouterr().out.strip()
        with httpx.Client(base_url=base_url, timeout=10) as client:
            client.post("/chat/completions", headers={"Authorization": f"Bearer {secret}",
                                                      "X-Api-Key": "hunter2"},
                        json={"model": "m", "user_id": "u1", "prompt_cache_key": "s1",
                              "messages": [{"role": "user", "content": f"my key {secret}"}],
                              "metadata": {"api_key": "hunter2"}})
            client.get("/v1/models", headers={"Authorization": f"Bearer {secret}"})
    finally:
        stop.set()
        thread.join(10)
    text = log.read_text()
    assert secret not in text and "hunter2" not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert [(r["method"], r["path"], r["status"]) for r in lines] == [
        ("POST", "/chat/completions", 200), ("GET", "/v1/models", 200)]
    post = lines[0]
    headers = {k.lower(): v for k, v in post["headers"].items()}
    assert headers["authorization"] == "***" and headers["x-api-key"] == "***"
    assert post["body"]["messages"][0]["content"] == "my key sk-***"
    assert post["body"]["metadata"] == {"api_key": "***"}
    assert (post["body"]["user_id"], post["body"]["prompt_cache_key"]) == ("u1", "s1")
