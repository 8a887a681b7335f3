"""``ctxfold serve`` from the command line, with nothing configured: the emulator upstream,
a 40-turn streamed tool loop from the OpenAI SDK at a small window."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI
from tests.serve.conftest import extends_between_installs, log_text

import ctxfold
from ctxfold.cli.main import build_parser, main
from ctxfold.cli.serve_cmd import run
from ctxfold.interop.coerce import to_messages
from ctxfold.serve.sessions import USE_CAPABILITY, reconcile
from ctxfold.transport.provider import serialize_body

TURNS = 40
SUMMARY_MARK = "[ctxfold:summary-request]"


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Nothing configured: an empty working directory and config home, no CTXFOLD_ vars."""
    for name in list(os.environ):
        if name.startswith("CTXFOLD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CTXFOLD_CONFIG_HOME", str(tmp_path / "config-home"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def script(path: Path) -> int:
    """40 model turns: bash calls, a use_capability call every tenth turn, an answer every
    eighth (then the client sends its next task)."""
    replies: list[dict[str, Any]] = []
    for turn in range(TURNS):
        if turn % 8 == 7:
            replies.append({"text": f"Done with step {turn}."})
            continue
        replies.append({"tool_calls": [{"id": f"call_{turn}", "name": "bash",
                                        "arguments": {"command": f"make step{turn}"}}]})
        if turn % 10 == 3:
            replies.append({"tool_calls": [{"id": f"cap_{turn}", "name": USE_CAPABILITY,
                                            "arguments": {"action": "list"}}]})
    path.write_text(json.dumps(replies))
    return sum(1 for r in replies if r.get("tool_calls", [{}])[0].get("name") == USE_CAPABILITY)


@pytest.fixture
def cli(fresh: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[tuple[str, Path, int]]:
    """``ctxfold serve --port 0 --window 8000 --script … --log-requests …`` in a thread;
    the base URL, the upstream's request log and the number of use_capability calls."""
    log = fresh / "upstream.jsonl"
    capabilities = script(fresh / "s.json")
    args = build_parser().parse_args([
        "serve", "--port", "0", "--window", "8000", "--script", str(fresh / "s.json"),
        "--log-requests", str(log)])
    ready, stop = threading.Event(), threading.Event()
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(run(args, ready=ready, stop=stop)))
    thread.start()
    try:
        assert ready.wait(90), result
        yield capsys.readouterr().out.strip(), log, capabilities
    finally:
        stop.set()
        thread.join(15)
    assert result == [0]


def bash_tool() -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": "bash", "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"]}}}


def test_a_40_turn_streamed_tool_loop_with_nothing_configured(cli, fresh: Path) -> None:
    base_url, log, capabilities = cli
    assert capabilities >= 2
    assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
    client = OpenAI(base_url=base_url, api_key="sk-anything", max_retries=0, timeout=60)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."},
                                      {"role": "user", "content": "task 0"}]
    history_sizes, actions, seen_names = [], [], []
    session = ""
    for turn in range(TURNS):
        history_sizes.append(len(serialize_body({"messages": messages})))
        raw = client.chat.completions.with_raw_response.create(
            model="deepseek-flash", messages=messages, tools=[bash_tool()], stream=True)
        actions.append(raw.headers["x-ctxfold-action"])
        session = session or raw.headers["x-ctxfold-session"]
        assert raw.headers["x-ctxfold-session"] == session
        text, calls = "", {}
        for chunk in raw.parse():
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for frag in choice.delta.tool_calls or ():
                    slot = calls.setdefault(frag.index, {"id": frag.id, "type": "function",
                                                         "function": {"name": "",
                                                                      "arguments": ""}})
                    slot["function"]["name"] += frag.function.name or ""
                    slot["function"]["arguments"] += frag.function.arguments or ""
        seen_names += [c["function"]["name"] for c in calls.values()]
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = list(calls.values())
        messages.append(message)
        for c in message.get("tool_calls", []):
            messages.append({"role": "tool", "tool_call_id": c["id"],
                             "content": log_text(2500, c["id"])})
        if not calls:
            messages.append({"role": "user", "content": f"task {turn + 1}"})
    # No proxy tool call reached the client, though the model made some.
    assert set(seen_names) == {"bash"} and len(seen_names) == 35
    assert actions.count("summary") >= 1
    # The client's history kept growing; the bodies the upstream got shrank at a checkpoint.
    assert history_sizes == sorted(history_sizes)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    proxied = [r for r in lines if r["method"] == "POST"
               and SUMMARY_MARK not in json.dumps(r["body"]["messages"][-1])]
    assert len(proxied) == TURNS + capabilities  # the rounds the proxy answered itself
    bodies = [serialize_body(r["body"]) for r in proxied]
    assert [len(b) for b in bodies] == [r["bytes"] for r in proxied]  # the exact bytes
    sizes = [len(b) for b in bodies]
    assert min(sizes[TURNS // 2:]) < max(sizes[: TURNS // 2])
    assert sizes[-1] < history_sizes[-1] / 3
    assert extends_between_installs(bodies) >= 20
    # The canonical transcript holds everything the client sent, byte for byte.
    cm = ctxfold.open_session(session, store_path=str(fresh / ".ctxfold" / "sessions"),
                              create=False, summarize=lambda _request: "")
    plan = reconcile(cm.canonical, to_messages(messages[:-1]))
    assert plan.extends and plan.matched == len(to_messages(messages[:-1]))
    kept = [ctxfold.message_to_openai(m, local_fields=False) for m in cm.canonical
            if m.role != "assistant" and m.name != USE_CAPABILITY]
    assert kept == [m for m in messages[:-1] if m["role"] != "assistant"]


def test_serve_flags_are_checked(fresh: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--port", "70000"]) == 2
    assert "--port must be between 0 and 65535" in capsys.readouterr().err
    assert main(["serve", "--window", "0"]) == 2
    assert main(["serve", "--script", str(fresh / "missing.json")]) == 1
    assert "cannot read emulator script" in capsys.readouterr().err
    (fresh / "ctxfold.toml").write_text('[provider]\nname = "deepseek"\n')
    assert main(["serve", "--log-requests", "x.jsonl"]) == 2
    assert "built-in emulator upstream" in capsys.readouterr().err
