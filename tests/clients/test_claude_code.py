"""Claude Code (npm ``@anthropic-ai/claude-code``, the Messages wire): ``claude -p`` pointed
at ``ctxfold serve`` with ``ANTHROPIC_BASE_URL``, the emulator's ``anthropic`` profile
upstream (or its ``deepseek`` chat profile, the proxy translating). One task of many Bash
rounds — each prints numbered filler, so the history grows through several checkpoints —
then ``claude -p --resume <session>`` for a second turn that goes on from there.
Forwarded-key mode (the client's ``x-api-key`` goes upstream).

What Claude Code sends (observed at 2.1.332, docs/serve.md "Claude Code"): always streamed,
``POST /v1/messages?beta=true``; ``x-api-key``, ``anthropic-version``, ``anthropic-beta``
(``claude-code-20250219``, …), ``X-Claude-Code-Session-Id``; a ``system`` of three text
blocks (a billing line, then two marked ``cache_control``), about 30 KB of tool schemas,
``metadata.user_id`` (a JSON string with its session id), ``thinking``,
``context_management``; for a model it does not know, a ``role: "system"`` message after the
first user message (its environment: working directory, platform, the deferred tools); and one
``cache_control`` mark on the last block of the newest message, moved every request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest
from tests.clients.harness import (
    Run,
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

#: Bash rounds of the first turn, and of both turns together.
FIRST, TOTAL = 18, 24
STEP_RE = "CTXFOLD-STEP-([0-9]+)"
PRINT = print_filler("{{next:" + STEP_RE + "}}")
DONE = "CTXFOLD-CLAUDE-DONE"
#: (model, upstream): a Claude model Claude Code knows (a 28 KB system prompt, 48 KB of
#: tool schemas, its environment in ``<system-reminder>`` blocks of the first user message) to
#: an Anthropic upstream; and a model it does not know, like a DeepSeek model behind
#: DeepSeek's Anthropic endpoint or, translated by the proxy, its chat API: Claude Code
#: assumes a 1M-token window for it (its own compaction never starts) and sends its
#: environment as a mid-conversation ``role: "system"`` message.
#: The window leaves room for a few Bash rounds above the prefix (about 20K tokens for the
#: Claude model, 11K for the other) before each checkpoint.
RUNS: list[tuple[str, Literal["anthropic", "deepseek"], int]] = [
    ("claude-sonnet-4-6", "anthropic", 40000), ("deepseek-v4-flash", "anthropic", 28000),
    ("deepseek-v4-flash", "deepseek", 28000)]


def _bash(text: str) -> dict[str, Any]:
    return {"text": text, "tool_calls": [{"name": "Bash", "arguments": {
        "command": PRINT, "description": "Print the next step of the filler"}}]}


#: The step number comes from the newest filler printed (it survives folding); the first
#: turn ends when the newest tool result is its last step, the second at the last of all.
RULES = {"rules": [
    {"when": {"no_tools": True}, "reply": {"text": "A title"}},
    {"when": {"last": "tool", "found_at_least": [STEP_RE, TOTAL]},
     "reply": {"text": f"{DONE}-2: all {TOTAL} steps printed."}},
    {"when": {"last": "tool", "contains": f"CTXFOLD-STEP-{FIRST} "},
     "reply": {"text": f"{DONE}-1: {FIRST} steps printed."}},
    {"when": {"tools": ["Bash"]}, "reply": _bash("Printing the filler.")},
]}


def claude_env(stack: Stack, home: Path) -> dict[str, str]:
    """Claude Code pointed at the proxy, with its own config directory and nothing sent
    anywhere else (docs/serve.md, "Claude Code")."""
    return client_env(home, {
        "ANTHROPIC_BASE_URL": stack.root_url,
        "ANTHROPIC_API_KEY": stack.client_key,
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTO_COMPACT": "1",
        # One retry, so a refused request fails the run in seconds, not after ten backoffs.
        "CLAUDE_CODE_MAX_RETRIES": "1",
    })


def claude(stack: Stack, work: Path, home: Path, model: str, prompt: str, *more: str) -> Run:
    """``claude -p PROMPT`` with Bash allowed (no permission bypass: that needs IS_SANDBOX=1
    as root), JSON result on stdout."""
    argv = [tool("claude"), "-p", prompt, "--output-format", "json", "--model", model,
            "--allowedTools", "Bash", "--max-turns", "60", *more]
    return run_client(argv, env=claude_env(stack, home), cwd=work, timeout=180)


def result_of(run: Run) -> dict[str, Any]:
    """The ``--output-format json`` result object (the last JSON line of stdout)."""
    for line in reversed(run.stdout.strip().splitlines()):
        if line.startswith("{"):
            found: dict[str, Any] = json.loads(line)
            return found
    raise AssertionError(f"no JSON result: {run.describe()}")


@pytest.mark.parametrize(("model", "upstream", "window"), RUNS)
def test_claude_code_long_task_then_a_resumed_turn(
        tmp_path: Path, model: str, upstream: Literal["anthropic", "deepseek"],
        window: int) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    with running(Stack(tmp_path / "stack", profile=upstream, window=window, rules=RULES,
                       key_mode="forwarded")) as stack:
        first = claude(stack, work, home, model,
                       "Turn 1: print the numbered filler, step by step.")
        check_client(stack, first)
        one = result_of(first)
        assert one["is_error"] is False and f"{DONE}-1" in one["result"], first.describe()
        second = claude(stack, work, home, model, "Turn 2: print some more of it.",
                        "--resume", one["session_id"])
        check_client(stack, second)
        two = result_of(second)
        assert two["session_id"] == one["session_id"]
        assert two["is_error"] is False and f"{DONE}-2" in two["result"], second.describe()
    check_run(stack, [first, second])
    rounds = tool_rounds(stack.upstream_requests())
    assert {name for name, _ in rounds} == {"Bash"}, rounds[:3]
    steps = {out.split("CTXFOLD-STEP-")[1].split()[0] for _, out in rounds
             if "CTXFOLD-STEP-" in out}
    assert steps >= {str(i) for i in range(1, TOTAL + 1)}, sorted(steps, key=int)
    assert reached_upstream(stack, "Turn 2: print some more of it.")
    # Both runs continued one conversation: one ctxfold session holds both turns.
    sessions = stack.sessions()
    assert len(sessions) == 1, sessions
    # ctxfold's breakpoints made the upstream cache hit, and Claude Code was told so.
    for result in (one, two):
        assert result["usage"]["cache_read_input_tokens"] > 0, result["usage"]
