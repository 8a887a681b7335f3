"""``ctxfold emulate``: argument parsing, script files, serving on 127.0.0.1."""

from __future__ import annotations

import argparse
import json
import threading

import httpx
import pytest

from ctxfold import ConfigError
from ctxfold.cli.emulate_cmd import run
from ctxfold.cli.main import build_parser, main
from ctxfold.emulator import load_script


def test_parser_knows_emulate() -> None:
    args = build_parser().parse_args(["emulate", "--profile", "mimo", "--window", "5000"])
    assert (args.profile, args.window, args.port) == ("mimo", 5000, 0)


def test_serves_script_until_stopped(tmp_path, capsys) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        {"text": "first"},
        {"tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "ls"}}]},
    ]))
    args = argparse.Namespace(port=0, profile="deepseek", window=None, script=str(script),
                              fault=[])
    ready, stop = threading.Event(), threading.Event()
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(run(args, ready=ready, stop=stop)))
    thread.start()
    try:
        assert ready.wait(10)
        base_url = capsys.readouterr().out.strip()
        assert base_url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=base_url, timeout=10) as client:
            body = {"messages": [{"role": "user", "content": "hi"}]}
            first = client.post("/chat/completions", json=body).json()
            assert first["choices"][0]["message"]["content"] == "first"
            second = client.post("/chat/completions", json=body).json()
            call = second["choices"][0]["message"]["tool_calls"][0]
            assert call["function"] == {"name": "bash", "arguments": '{"command":"ls"}'}
            assert second["choices"][0]["finish_reason"] == "tool_calls"
    finally:
        stop.set()
        thread.join(10)
    assert result == [0]


def test_bad_script_file_is_a_clear_error(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"txt": "typo"}]))
    with pytest.raises(ConfigError, match=r"bad.json\[0\].*unknown key.*txt"):
        load_script(bad)
    assert main(["emulate", "--script", str(tmp_path / "missing.json")]) == 1
    assert "cannot read emulator script" in capsys.readouterr().err


def test_bad_profile_and_port() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["emulate", "--profile", "nope"])
    args = argparse.Namespace(port=70000, profile="deepseek", window=None, script=None)
    with pytest.raises(ConfigError, match="--port"):
        run(args)


def test_faults_from_the_command_line(capsys) -> None:
    from ctxfold.cli.emulate_cmd import parse_fault

    fault = parse_fault("overloaded@3x2")
    assert (fault.kind, fault.at, fault.count) == ("overloaded", 3, 2)
    with pytest.raises(ConfigError, match="expected KIND"):
        parse_fault("rate limit")
    with pytest.raises(ConfigError, match="unknown fault kind"):
        parse_fault("meteor@1")
    args = build_parser().parse_args(["emulate", "--fault", "rate_limit@0"])
    ready, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=lambda: run(args, ready=ready, stop=stop))
    thread.start()
    try:
        assert ready.wait(10)
        base_url = capsys.readouterr().out.strip()
        body = {"messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(base_url=base_url, timeout=10) as client:
            first = client.post("/chat/completions", json=body)
            assert first.status_code == 429 and "retry-after" in first.headers
            assert client.post("/chat/completions", json=body).status_code == 200
    finally:
        stop.set()
        thread.join(10)


def test_key_env_must_name_a_set_variable(monkeypatch, capsys) -> None:
    monkeypatch.delenv("CTXFOLD_TEST_UNSET_KEY", raising=False)
    assert main(["emulate", "--key-env", "CTXFOLD_TEST_UNSET_KEY"]) == 2
    assert "$CTXFOLD_TEST_UNSET_KEY is not set" in capsys.readouterr().err
