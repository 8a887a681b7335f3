"""Codex CLI (npm ``@openai/codex``, ``wire_api = "responses"``): a long session through
``ctxfold serve`` — ``codex exec`` then ``codex exec resume --last`` per turn, the model
calling Codex's own ``exec_command`` tool — then ``codex exec fork <thread>``: the whole
history again under a new thread id. With its default tools, for a model Codex does not know
(``namespace`` ``multi_agent_v1`` and ``web_search``) and for a GPT-5 model (``custom``
``apply_patch``, ``tool_search``, ``web_search``). Forwarded-key mode.

What Codex sends (observed at 0.169.0 with ``ctxfold emulate --log-requests``): streamed
Responses, ``store: false``, no ``instructions`` for an unknown model (its prompt is the
first ``developer`` item), headers ``session-id`` / ``thread-id`` / ``x-client-request-id``
(the thread id), ``x-codex-window-id`` (``<thread>:<n>``) and ``x-codex-turn-metadata``;
body ``prompt_cache_key`` (the thread id) and ``client_metadata`` (``session_id``,
``thread_id``, ``turn_id``). The first user item is ``<environment_context>`` (cwd, date):
two threads in one directory on one day share their first user message. Earlier items are
re-sent verbatim (ids and argument strings as received).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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

TURNS = 16
PRINT = print_filler(TURN)

RULES = {"rules": [
    {"when": {"last": "tool"}, "reply": {"text": "Turn {{match:Turn ([0-9]+)}}: printed."}},
    {"when": {"last": "user", "tools": ["exec_command"]},
     "reply": {"text": "", "tool_calls": [{"name": "exec_command",
                                           "arguments": {"cmd": PRINT}}]}},
]}


def _codex_home(stack: Stack, home: Path, model: str) -> Path:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f'model = "{model}"\n'
        'model_provider = "ctxfold"\n'
        'approval_policy = "never"\n'
        'sandbox_mode = "danger-full-access"\n'
        "\n[model_providers.ctxfold]\n"
        'name = "ctxfold"\n'
        f'base_url = "{stack.base_url}"\n'
        'env_key = "CTXFOLD_CLIENT_KEY"\n'
        'wire_api = "responses"\n')
    return codex_home


def _thread_id(stdout: str) -> str:
    for line in stdout.splitlines():
        if '"thread.started"' in line:
            return str(json.loads(line)["thread_id"])
    raise AssertionError(f"no thread.started event: {stdout[-1000:]}")


@pytest.mark.parametrize("model", ["deepseek-flash", "gpt-5.5"])
def test_codex_long_session_resumed_per_turn_then_forked(tmp_path: Path, model: str) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    runs = []
    with running(Stack(tmp_path / "stack", profile="responses", window=20000, rules=RULES,
                       key_mode="forwarded")) as stack:
        env = client_env(home, {"CODEX_HOME": str(_codex_home(stack, home, model)),
                                "CTXFOLD_CLIENT_KEY": stack.client_key})
        codex = [tool("codex"), "exec", "--json", "--skip-git-repo-check"]
        thread = ""
        for turn in range(1, TURNS + 1):
            text = f"Turn {turn}: print step {turn} of the filler."
            argv = [*codex, text] if turn == 1 else [*codex, "resume", "--last", text]
            runs.append(run_client(argv, env=env, cwd=work, timeout=90))
            check_client(stack, runs[-1])
            assert "printed." in runs[-1].stdout, runs[-1].describe()
            thread = thread or _thread_id(runs[-1].stdout)
        runs.append(run_client([*codex, "fork", thread, "After the fork: print it again."],
                               env=env, cwd=work, timeout=90))
    check_run(stack, runs)
    # Codex reports its own unknown-model notice as an error item ("Model metadata for
    # `deepseek-flash` not found. Defaulting to fallback metadata"): not the proxy's doing.
    errors = [line for r in runs for line in r.stdout.splitlines()
              if '"type":"error"' in line and "Model metadata for" not in line]
    assert errors == [], errors
    rounds = tool_rounds(stack.upstream_requests())
    assert {name for name, _ in rounds} == {"exec_command"}
    steps = {out.split("CTXFOLD-STEP-")[1].split()[0] for _, out in rounds
             if "CTXFOLD-STEP-" in out}
    assert len(steps) >= TURNS, sorted(steps)
    assert reached_upstream(stack, "After the fork: print it again.")
