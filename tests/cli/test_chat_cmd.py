"""``ctxfold chat``: scripted turns and /commands against the loopback emulator.

The provider is the ``deepseek`` plugin pointed at an in-test :class:`Emulator` on
127.0.0.1, so these tests run whatever the default ``[provider] name`` is.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxfold.cli.main import main

KEY_ENV = "CTXFOLD_TEST_CHAT_KEY"
LONG = " ".join(f"word{i}" for i in range(600))  # ≈ 1K heuristic tokens


@pytest.fixture
def emulator() -> Iterator[Any]:
    from ctxfold import Emulator

    with Emulator("deepseek") as emu:
        yield emu


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, emulator: Any) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXFOLD_CONFIG_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-real-key")
    (tmp_path / "ctxfold.toml").write_text(f"""\
[provider]
name = "deepseek"
base_url = "{emulator.base_url}"
api_key_env = "{KEY_ENV}"
context_window = 4000
[estimator]
name = "heuristic"
[summarizer]
name = "llm"
[store]
path = "sessions"
""")
    return tmp_path


def chat(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, script: str,
         *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(script))
    code = main(["chat", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def transcript(workdir: Path, session: str) -> list[dict[str, object]]:
    lines = (workdir / "sessions" / f"{session}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_turns_are_appended_and_replied(workdir: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch,
                                        emulator: Any) -> None:
    code, out, err = chat(capsys, monkeypatch, f"{LONG}\nand again {LONG}\n/quit\nignored\n",
                          "--session", "c1", "--system", "be brief")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "[new session c1; /help for commands]"
    assert out.count("OK.\n") == 2
    ratios = re.findall(r"cache hit ([\d.]+)% \((\d+)/(\d+)\)", out)
    assert len(ratios) == 2
    for pct, hit, prompt in ratios:
        assert float(pct) == pytest.approx(round(int(hit) / int(prompt) * 100, 1))
    assert int(ratios[1][1]) > 0  # the second turn extends the first: a prefix-cache hit
    assert [m["role"] for m in transcript(workdir, "c1")] == [
        "system", "user", "assistant", "user", "assistant"]
    assert len(emulator.requests) == 2
    assert sum(1 for line in out.splitlines() if line.startswith("[prompt")) == 2


def test_automatic_checkpoint_is_reported(workdir: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    script = "".join(f"turn {i}: {LONG}\n" for i in range(5))
    code, out, err = chat(capsys, monkeypatch, script, "--session", "c2")
    assert (code, err) == (0, "")
    installed = [line for line in out.splitlines() if "checkpoint installed" in line]
    assert installed and "version 1, summary" in installed[0]
    assert len(transcript(workdir, "c2")) == 10  # maintenance never edits the transcript


def test_commands(workdir: Path, capsys: pytest.CaptureFixture[str],
                  monkeypatch: pytest.MonkeyPatch) -> None:
    script = (f"{LONG}\nsecond {LONG}\n/status\n/compact keep the word list\n/status\n"
              "/rewind 0\n/status\n/help\n/quit\n")
    code, out, err = chat(capsys, monkeypatch, script, "--session", "c3")
    assert (code, err) == (0, "")
    status = [line for line in out.splitlines() if line.startswith("session c3:")]
    assert len(status) == 3
    assert "4 messages" in status[0] and "trigger 3200, window 4000" in status[0]
    assert "projection version 0" in status[0]
    assert "[compact: checkpoint installed (version 1, 1 summary calls)" in out
    assert "projection version 1" in status[1]
    assert ("[rewound to 0 messages (dropped 4); the history as it was is session "
            "c3-rewound-1]") in out
    assert len(transcript(workdir, "c3-rewound-1")) == 4
    # The checkpoint covered messages that are gone, so it no longer applies.
    assert "0 messages" in status[2] and "projection version 0" in status[2]
    assert "/compact [FOCUS]" in out
    assert transcript(workdir, "c3") == []


def test_errors_keep_going_and_exit_1(workdir: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = chat(capsys, monkeypatch, "/bogus\n/rewind x\n/rewind 99\nhello\n",
                          "--session", "c4")
    assert code == 1
    assert "unknown command '/bogus'" in err and "got 'x'" in err and "upto=99" in err
    assert "OK." in out  # the turn after the errors still ran


def test_resume_existing_session(workdir: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert chat(capsys, monkeypatch, "first\n", "--session", "c5")[0] == 0
    code, out, _ = chat(capsys, monkeypatch, "second\n", "--session", "c5")
    assert code == 0 and out.startswith("[session c5: 2 messages, cache warm]")
    assert [m["content"] for m in transcript(workdir, "c5")] == [
        "first", "OK.", "second", "OK."]


@pytest.mark.parametrize("argv", [(), ("--system", "be brief")])
def test_a_chat_where_nothing_was_said_leaves_no_session(
        workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        argv: tuple[str, ...]) -> None:
    """`ctxfold chat </dev/null` left a 0-byte session that `replay` of the folder rejected."""
    code, out, _ = chat(capsys, monkeypatch, "", "--session", "quiet", *argv)
    assert code == 0 and "not kept: nothing was said" in out
    assert not list((workdir / "sessions").glob("quiet*"))
    assert chat(capsys, monkeypatch, "/status\n", "--session", "quiet")[0] == 0
    assert not list((workdir / "sessions").glob("quiet*"))


def test_hostile_session_id(workdir: Path, capsys: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch, emulator: Any) -> None:
    code, _, err = chat(capsys, monkeypatch, "hi\n", "--session", "../evil")
    assert code == 1 and "session" in err
    assert not (workdir / "evil.jsonl").exists() and emulator.requests == []


def test_subprocess_with_piped_input(workdir: Path) -> None:
    env = {**os.environ, "CTXFOLD_CONFIG_HOME": str(workdir / "home"),
           KEY_ENV: "sk-test-not-a-real-key"}
    proc = subprocess.run(
        [sys.executable, "-m", "ctxfold.cli.main", "chat", "--session", "p1"],
        input="hello\n/status\n/quit\n", capture_output=True, text=True, cwd=workdir,
        env=env, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "OK." in proc.stdout and "session p1: 2 messages" in proc.stdout
    assert "> " not in proc.stdout  # no prompt when stdin is not a terminal
    assert "sk-test" not in proc.stdout + proc.stderr


def test_default_provider_is_the_in_process_emulator(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No [provider] section at all: the built-in ``emulator`` provider answers."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXFOLD_CONFIG_HOME", str(tmp_path / "home"))
    for name in list(os.environ):
        if name.startswith("CTXFOLD_PROVIDER_"):
            monkeypatch.delenv(name)
    code, out, err = chat(capsys, monkeypatch, f"{LONG}\nagain {LONG}\n/status\n",
                          "--session", "d1", "--root", str(tmp_path / "s"))
    assert (code, err) == (0, ""), err
    assert out.count("OK.\n") == 2 and "window 1048576" in out
    hits = re.findall(r"cache hit [\d.]+% \((\d+)/(\d+)\)", out)
    assert len(hits) == 2 and int(hits[1][0]) > 0
    assert len((tmp_path / "s" / "d1.jsonl").read_text().splitlines()) == 4


def test_a_failed_turn_is_retried_without_a_duplicate_user_message(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    emulator: Any,
) -> None:
    from ctxfold import Fault

    # Every attempt of the first turn fails (the provider stays unreachable for it).
    emulator.inject(Fault("overloaded", count=3))  # the first try and both retries
    code, _, err = chat(capsys, monkeypatch, "hello\n", "--session", "c9")
    assert code == 1 and "503" in err
    assert [m["content"] for m in transcript(workdir, "c9")] == ["hello"]
    code, out, _ = chat(capsys, monkeypatch, "hello\n", "--session", "c9")
    assert code == 0 and "the last turn got no answer: 'hello'" in out
    assert [(m["role"], m["content"]) for m in transcript(workdir, "c9")] == [
        ("user", "hello"), ("assistant", "OK.")]


def test_search_finds_folded_turns_without_touching_the_transcript(
        workdir: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    script = (f"zebra-77 {LONG}\nsecond {LONG}\n/compact\n/search ZEBRA-77\n/search\n"
              "/search nothing-like-this\n/quit\n")
    code, out, err = chat(capsys, monkeypatch, script, "--session", "c9")
    assert code == 1 and "/search: " in err and "needs arguments.query" in err
    assert "[compact: checkpoint installed" in out
    hits = [line for line in out.splitlines() if line.startswith("#")]
    assert hits and hits[0].startswith("#0 user: zebra-77")
    assert "[search: 1 messages]" in out and "[search: 0 messages]" in out
    assert len(transcript(workdir, "c9")) == 4


def test_pin_puts_a_rule_in_every_checkpoint_and_inspect_shows_it(
        workdir: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    rule = "Never print the API key."
    script = (f"start {LONG}\n/pin {rule}\n/pin\nsecond {LONG}\n/compact\n"
              f"third {LONG}\n/compact\n/quit\n")
    # 5,000 tokens: at 4,000 the use_capability tool a checkpoint offers (~220 heuristic
    # tokens) leaves the second fold nothing to gain.
    code, out, err = chat(capsys, monkeypatch, script, "--session", "p1", "--window", "5000")
    assert code == 1 and "/pin needs the rule text" in err  # the bare /pin
    assert "[pinned as #2: every checkpoint carries it verbatim after the task]" in out
    assert out.count("[compact: checkpoint installed") == 2
    records = transcript(workdir, "p1")
    assert [r.get("local_only", False) for r in records].count(True) == 1
    code = main(["inspect", "p1", "--json"])
    report = json.loads(capsys.readouterr().out)
    rules = report["rules"]
    assert rules["explicit"] == [{"text": rule, "position": 2, "message_id": "",
                                  "reason": "chat /pin"}]
    assert rules["checkpoint_rules"] == [f"- (#2; pinned: chat /pin) {rule}"]
    assert main(["inspect", "p1"]) == 0
    text = capsys.readouterr().out
    assert "pins: 1 explicit; the checkpoint carries 1 standing rules" in text
    assert f"  - (#2; pinned: chat /pin) {rule}" in text


def test_a_pin_after_a_failed_turn_does_not_hide_the_unanswered_message(
        workdir: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxfold import Message
    from ctxfold.cli.chat_cmd import pending_user_text

    class Session:
        canonical = (Message(role="user", content="hello"),
                     Message(role="user", content="[ctxfold:pin] {}\nx", origin="host",
                             local_only=True))

    assert pending_user_text(Session()) == "hello"


def test_the_default_provider_says_it_is_the_emulator(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXFOLD_CONFIG_HOME", str(tmp_path / "home"))
    (tmp_path / "ctxfold.toml").write_text('[store]\npath = "sessions"\n')  # nothing chosen
    code, out, err = chat(capsys, monkeypatch, "hello\n/quit\n", "--session", "d1")
    assert (code, err) == (0, "")
    assert out.splitlines()[0].startswith("[model: the loopback emulator ('emulator'), not a "
                                          "real model")
    assert out.splitlines()[1] == "[new session d1; /help for commands]"


def test_the_models_use_capability_calls_are_answered_within_the_turn(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After a checkpoint the model is offered use_capability; chat answers its calls (it
    has no other tool) instead of leaving an unanswered call in the transcript."""
    from ctxfold import Emulator, ReplySpec, ToolCall

    def model(body: dict[str, Any], _profile: Any) -> Any:
        names = [t["function"]["name"] for t in body.get("tools") or ()]
        last = body["messages"][-1]
        if "use_capability" in names and last["role"] == "user" and "again" in last["content"]:
            return ReplySpec(text="", tool_calls=(ToolCall(
                id="look1", name="use_capability", arguments=json.dumps(
                    {"action": "call", "capability_id": "session:search",
                     "arguments": {"query": "word599"}})),))
        return ReplySpec(text="OK.")

    with Emulator("deepseek", script=model) as emu:
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("CTXFOLD_CONFIG_HOME", str(tmp_path / "home"))
        monkeypatch.setenv(KEY_ENV, "sk-test-not-a-real-key")
        (tmp_path / "ctxfold.toml").write_text(
            f'[provider]\nname = "deepseek"\nbase_url = "{emu.base_url}"\n'
            f'api_key_env = "{KEY_ENV}"\ncontext_window = 4000\n[estimator]\n'
            'name = "heuristic"\n[summarizer]\nname = "llm"\n[store]\npath = "sessions"\n')
        code, out, err = chat(capsys, monkeypatch,
                              f"{LONG}\nsecond {LONG}\n/compact\nagain {LONG[:200]}\n",
                              "--session", "look")
    assert (code, err) == (0, "")
    assert "[the model looked up the session's history: 1 use_capability call(s) answered]" \
        in out
    records = transcript(tmp_path, "look")
    answer = next(r for r in records if r.get("tool_call_id") == "look1")
    assert json.loads(answer["content"])["hits"]
    assert records[-1]["role"] == "assistant" and records[-1]["content"] == "OK."
