"""opencode (npm ``opencode-ai``): a long session through ``ctxfold serve`` — ``opencode run``
then ``opencode run -c`` per turn, the model calling opencode's own ``bash`` tool — then
``opencode run --session ID --fork``: the whole history again under a new session id.
Forwarded-key mode.

What opencode sends (observed at 1.18.33 with ``ctxfold emulate --log-requests``; the
provider is ``@ai-sdk/openai-compatible``): streamed Chat Completions with
``stream_options.include_usage``; headers ``x-session-id`` and ``x-session-affinity`` carrying
its session id (``ses_…``), the same on its title request; a title request (system "You are a
title generator…", no tools) at a session's first turn; a system prompt with the working
directory and today's date; earlier tool calls re-serialized compactly (``JSON.stringify``),
whatever the model sent — here spaced.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.clients.harness import (
    TURN,
    Stack,
    check_client,
    check_run,
    client_env,
    print_filler,
    reached_upstream,
    run_client,
    running,
    tool,
    tool_rounds,
)

TURNS = 14
PRINT = print_filler(TURN)
SPACED = json.dumps({"command": PRINT, "description": "Print step " + TURN + " of the filler"},
                    separators=(", ", ": "))

RULES = {"rules": [
    {"when": {"no_tools": True}, "reply": {"text": "Filler steps"}},
    {"when": {"last": "tool"}, "reply": {"text": "Turn {{match:Turn ([0-9]+)}}: printed."}},
    {"when": {"last": "user", "tools": ["bash"]},
     "reply": {"text": "", "tool_calls": [{"name": "bash", "arguments": SPACED}]}},
]}


def _config(stack: Stack) -> dict:
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"ctxfold": {
            "npm": "@ai-sdk/openai-compatible", "name": "ctxfold",
            "options": {"baseURL": stack.base_url, "apiKey": "{env:CTXFOLD_CLIENT_KEY}"},
            "models": {"deepseek-flash": {"name": "deepseek-flash", "tool_call": True,
                                          "limit": {"context": 200000, "output": 8192}}}}},
        "model": "ctxfold/deepseek-flash", "small_model": "ctxfold/deepseek-flash",
        "autoupdate": False, "share": "disabled",
    }


def _session_id(stdout: str) -> str:
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        sid = event.get("sessionID") or (event.get("part") or {}).get("sessionID")
        if sid:
            return str(sid)
    raise AssertionError(f"no sessionID in opencode's JSON events: {stdout[-1000:]}")


def test_opencode_long_session_with_its_bash_tool_then_a_fork(tmp_path: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    runs = []
    with running(Stack(tmp_path / "stack", profile="deepseek", window=16000, rules=RULES,
                       key_mode="forwarded")) as stack:
        env = client_env(home, {"CTXFOLD_CLIENT_KEY": stack.client_key,
                                "OPENCODE_DISABLE_MODELS_FETCH": "true",
                                "OPENCODE_DISABLE_AUTOUPDATE": "true"})
        # the global config file (a project's opencode.json is read only inside a git work tree)
        config = Path(env["XDG_CONFIG_HOME"]) / "opencode" / "opencode.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps(_config(stack), indent=1))
        opencode = [tool("opencode"), "run", "--format", "json"]
        session = ""
        for turn in range(1, TURNS + 1):
            text = f"Turn {turn}: print step {turn} of the filler with bash."
            argv = [*opencode, text] if turn == 1 else [*opencode, "-c", text]
            runs.append(run_client(argv, env=env, cwd=work, timeout=90))
            check_client(stack, runs[-1])
            assert f"Turn {turn}: printed." in runs[-1].stdout or "printed" in \
                runs[-1].stdout, runs[-1].describe()
            session = session or _session_id(runs[-1].stdout)
        runs.append(run_client([*opencode, "--session", session, "--fork",
                                "After the fork: print the filler once more."],
                               env=env, cwd=work, timeout=90))
    check_run(stack, runs)
    rounds = tool_rounds(stack.upstream_requests())
    assert {name for name, _ in rounds} == {"bash"}
    steps = {out.split()[0] for _, out in rounds if out.startswith("CTXFOLD-STEP-")}
    assert len(steps) >= TURNS, sorted(steps)
    assert reached_upstream(stack, "After the fork: print the filler once more.")
