"""simonw ``llm`` (PyPI ``llm``): a long conversation through ``ctxfold serve`` — one
``llm`` command per turn, ``-c`` continuing it, a Python tool given with ``--functions`` —
then a rewind: the same conversation loaded with llm's Python API, cut back three turns
and continued with a different message. Forwarded-key mode.

``llm`` streams Chat Completions by default and re-serializes every earlier tool call's
arguments with ``json.dumps`` (spaced: ``{"step": "3"}``) when it rebuilds the history
(``llm/default_plugins/openai_models.py``, ``_append_llm_message``), whatever bytes the
model sent — here compact ones.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.clients.harness import (
    TURN,
    Stack,
    check_client,
    check_run,
    client_env,
    reached_upstream,
    run_client,
    running,
    tool_rounds,
    venv_python,
)

TURNS = 16
REWIND_BACK = 3

TOOLS = textwrap.dedent('''
    def lorem(step: str) -> str:
        """Return the filler text of one step."""
        return f"CTXFOLD-STEP-{step} " + "lorem ipsum dolor sit amet, consectetur elit " * 110
''')

RULES = {"rules": [
    {"when": {"last": "tool"}, "reply": {"text": "Turn " + TURN + ": I have read the filler."}},
    {"when": {"last": "user", "tools": ["lorem"]},
     "reply": {"text": "", "tool_calls": [{"name": "lorem", "arguments": {"step": TURN}}]}},
]}

FORK = textwrap.dedent('''
    import sys
    import llm
    from llm.cli import load_conversation

    tools_path, back, message = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    namespace = {}
    exec(open(tools_path).read(), namespace)
    conversation = load_conversation(None)
    kept = conversation.responses[: len(conversation.responses) - back]
    fork = conversation.model.conversation()
    fork.responses = list(kept)
    reply = fork.chain(message, tools=[namespace["lorem"]])
    print(reply.text())
''')


def _llm_home(stack: Stack, home: Path) -> dict[str, str]:
    user = home / "llm"
    user.mkdir(parents=True, exist_ok=True)
    (user / "extra-openai-models.yaml").write_text(
        "- model_id: ctxfold\n"
        "  model_name: deepseek-flash\n"
        f"  api_base: {stack.base_url}\n"
        "  api_key_name: ctxfold\n"
        "  supports_tools: true\n")
    (user / "keys.json").write_text(json.dumps({"ctxfold": stack.client_key}))
    (user / "default_model.txt").write_text("ctxfold")
    return client_env(home, {"LLM_USER_PATH": str(user)})


def test_llm_long_conversation_with_functions_then_a_rewind(tmp_path: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    tools = work / "tools.py"
    tools.write_text(TOOLS)
    llm = [venv_python("llm"), "-m", "llm"]
    runs = []
    with running(Stack(tmp_path / "stack", profile="deepseek", window=6000, rules=RULES,
                       key_mode="forwarded")) as stack:
        env = _llm_home(stack, home)
        for turn in range(1, TURNS + 1):
            argv = [*llm, "--functions", str(tools), f"Turn {turn}: read step {turn} of the "
                    "filler with the lorem tool, then tell me you read it."]
            if turn > 1:
                argv.insert(3, "-c")
            runs.append(run_client(argv, env=env, cwd=work, timeout=60))
            check_client(stack, runs[-1])
            assert "I have read the filler" in runs[-1].stdout, runs[-1].describe()
        (work / "fork.py").write_text(FORK)
        runs.append(run_client([venv_python("llm"), str(work / "fork.py"), str(tools),
                                str(REWIND_BACK), "Instead: read step 99 of the filler."],
                               env=env, cwd=work, timeout=60))
    check_run(stack, runs)
    rounds = tool_rounds(stack.upstream_requests())
    assert {name for name, _ in rounds} == {"lorem"}
    steps = {out.split()[0] for _, out in rounds}
    assert steps >= {f"CTXFOLD-STEP-{t}" for t in range(1, TURNS + 1)}, sorted(steps)
    # the rewound conversation (three turns fewer, then a different message) went upstream
    assert reached_upstream(stack, "Instead: read step 99 of the filler.")
    assert "I have read the filler" in runs[-1].stdout, runs[-1].describe()
