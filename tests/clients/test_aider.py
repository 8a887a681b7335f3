"""aider (PyPI ``aider-chat``): a long editing session through ``ctxfold serve`` with
aider's scripting API (``Coder.create`` + ``coder.run``, https://aider.chat/docs/scripting.html)
in a git repository, the model answering in aider's ``whole`` edit format (aider edits files
from text, not tool calls), streamed; then ``/clear`` and two more turns (a rewind to the
start). Forwarded-key mode.

What aider does to its history (``aider/coders/base_coder.py``, ``format_chat_chunks``):
every request is rebuilt as system prompt, example messages, the repo map, the earlier
exchanges, then the files in the chat (re-sent whole each turn, after the history) and the
new message; and once the earlier exchanges pass ``max_chat_history_tokens`` (1/16 of the
model's input window, 1K–8K) a background call of the weak model summarizes them and the
summary replaces them (``aider/history.py``, ``ChatSummary``). The model metadata here gives a
128K window, so aider summarizes at 8K tokens, above ctxfold's trigger.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

from tests.clients.harness import (
    TURN,
    Stack,
    check_run,
    client_env,
    run_client,
    running,
    venv_python,
)

TURNS = 18
#: The window ctxfold maintains, and the input window aider is told its model has. Aider
#: keeps its own history under 1/16 of the latter (8K tokens here) and summarizes it by
#: sending the history as ONE message — which, at a window as small as this test's, no fold
#: could bring under the window (one message alone over it is a 400, as a provider of that
#: window would answer). So the file is short, aider never reaches its own cap in these
#: turns, and ctxfold folds the growing history instead.
WINDOW = 3000
MODEL_INPUT = 131072
FILLER = "lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod\n" * 8
WHOLE = "notes.md\n```\n# Step " + TURN + "\nCTXFOLD-STEP-" + TURN + "\n" + FILLER + "```\n"

RULES = {"rules": [
    {"when": {"system_contains": "summarize this partial conversation"},
     "reply": {"text": "I asked you to rewrite notes.md step by step, and you did."}},
    {"when": {"last": "user"}, "reply": {"text": "Here is notes.md for this step.\n\n" + WHOLE}},
]}

SCRIPT = textwrap.dedent('''
    import json
    import sys

    from aider.coders import Coder
    from aider.io import InputOutput
    from aider.models import Model, register_litellm_models

    turns = int(sys.argv[1])
    register_litellm_models(["model.metadata.json"])
    io = InputOutput(yes=True, pretty=False, fancy_input=False)
    model = Model("openai/deepseek-flash")
    coder = Coder.create(main_model=model, edit_format="whole", io=io, fnames=["notes.md"],
                         stream=True, auto_commits=False, dirty_commits=False,
                         suggest_shell_commands=False, detect_urls=False)
    seen = []
    for n in range(1, turns + 1):
        coder.run(f"Turn {n}: rewrite notes.md for step {n}, keeping the filler text.")
        seen.append(open("notes.md").read().splitlines()[1])
    coder.run("/clear")
    for n in (90, 91):
        coder.run(f"Turn {n}: after the clear, rewrite notes.md for step {n}.")
        seen.append(open("notes.md").read().splitlines()[1])
    print(json.dumps(seen))
''')

SOURCE = textwrap.dedent('''
    """A small module so aider's repo map has something to show."""


    def area(width: float, height: float) -> float:
        return width * height


    class Shape:
        def scale(self, factor: float) -> "Shape":
            return self
''')


def _repo(work: Path) -> None:
    work.mkdir()
    (work / "geometry.py").write_text(SOURCE)
    (work / "notes.md").write_text("# Step 0\n")
    (work / "model.metadata.json").write_text(json.dumps({"openai/deepseek-flash": {
        "max_input_tokens": MODEL_INPUT, "max_output_tokens": 2048, "litellm_provider": "openai",
        "mode": "chat", "input_cost_per_token": 0.0, "output_cost_per_token": 0.0}}))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=work, check=True)
    subprocess.run([*git, "add", "."], cwd=work, check=True)
    subprocess.run([*git, "commit", "-qm", "start"], cwd=work, check=True)


def test_aider_long_editing_session_in_whole_format_then_clear(tmp_path: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    _repo(work)
    (tmp_path / "aider_session.py").write_text(SCRIPT)
    with running(Stack(tmp_path / "stack", profile="deepseek", window=WINDOW, rules=RULES,
                       key_mode="forwarded")) as stack:
        env = client_env(home, {"OPENAI_API_BASE": stack.base_url,
                                "OPENAI_API_KEY": stack.client_key,
                                "AIDER_ANALYTICS": "false", "AIDER_CHECK_UPDATE": "false",
                                "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
        run = run_client([venv_python("aider"), str(tmp_path / "aider_session.py"),
                          str(TURNS)], env=env, cwd=work, timeout=300)
    check_run(stack, [run])
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    # every turn's edit reached the file (aider parsed the streamed reply and applied it)
    assert len(seen) == TURNS + 2 and all(s.startswith("CTXFOLD-STEP-") for s in seen), seen
    assert len(set(seen[:TURNS])) == TURNS, seen
