"""mini-swe-agent (PyPI ``mini-swe-agent``, through LiteLLM's OpenAI-compatible route):
one long task through ``ctxfold serve``, then the same task re-run — the same requests again
up to a step whose tool output differs, then a fork — in forwarded-key mode.

mini-swe-agent sends Chat Completions without streaming, one ``bash`` tool
(``minisweagent/models/utils/actions_toolcall.py``, ``BASH_TOOL``) and re-sends each
assistant message as LiteLLM returned it (``message.model_dump()``), so the arguments are
the model's own bytes.
"""

from __future__ import annotations

from pathlib import Path

from tests.clients.harness import (
    Stack,
    check_client,
    check_run,
    client_env,
    print_filler,
    run_client,
    running,
    tool,
    tool_rounds,
)

STEPS = 30  # tool rounds of one run
FORK_AT = 14  # from this round on, each command also prints marker.txt (differs per run)
#: The step number comes from the newest marker the agent printed, not from how many tool
#: results the request holds: once the proxy folds a checkpoint, it holds fewer.
STEP = "{{next:CTXFOLD-STEP-([0-9]+)}}"
PRINT = print_filler(STEP, 120)
DONE = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
TASK = "Print the numbered filler text, step by step, then submit."


def _bash(command: str, text: str) -> dict:
    return {"text": text, "tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


RULES = {"rules": [
    {"when": {"tools": ["bash"], "found_at_least": ["CTXFOLD-STEP-([0-9]+)", STEPS]},
     "reply": _bash(DONE, "All steps are printed; submitting.")},
    {"when": {"tools": ["bash"], "found_at_least": ["CTXFOLD-STEP-([0-9]+)", FORK_AT]},
     "reply": _bash("cat marker.txt && " + PRINT, f"Step {STEP}: the marker, then the text.")},
    {"when": {"tools": ["bash"]},
     "reply": _bash(PRINT, f"Step {STEP}: printing the filler text.")},
]}


def _mini(stack: Stack, work: Path, home: Path, label: str):
    argv = [tool("mini"), "-y", "--exit-immediately", "-m", "openai/deepseek-flash",
            "-t", TASK, "-c", "mini.yaml",
            "-c", f"model.model_kwargs.api_base={stack.base_url}",
            "-c", f"model.model_kwargs.api_key={stack.client_key}",
            "-c", "model.cost_tracking=ignore_errors",
            "-c", f"agent.step_limit={STEPS + 10}", "-c", "agent.cost_limit=0",
            "-o", str(work / f"{label}.traj.json")]
    env = client_env(home, {"MSWEA_CONFIGURED": "true", "MSWEA_SILENT_STARTUP": "1",
                            "MSWEA_COST_TRACKING": "ignore_errors",
                            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "2",
                            "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    return run_client(argv, env=env, cwd=work, timeout=180)


def test_mini_swe_agent_long_task_then_a_rerun_that_forks(tmp_path: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    with running(Stack(tmp_path / "stack", profile="deepseek", window=12000,
                       rules=RULES, key_mode="forwarded")) as stack:
        (work / "marker.txt").write_text("first run\n")
        first = _mini(stack, work, home, "first")
        check_client(stack, first)
        (work / "marker.txt").write_text("second run\n")
        second = _mini(stack, work, home, "second")
    check_run(stack, [first, second])
    rounds = tool_rounds(stack.upstream_requests())
    assert {name for name, _ in rounds} == {"bash"}, rounds[:3]
    steps = {out.split("CTXFOLD-STEP-")[1].split()[0] for _, out in rounds
             if "CTXFOLD-STEP-" in out}
    assert steps >= {str(i) for i in range(1, STEPS + 1)}, sorted(steps, key=int)
    assert any("second run" in out for _, out in rounds), "the re-run never reached the fork"
