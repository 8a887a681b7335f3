"""The newcomer path: README.md's "Use it in an agent" snippet, run as written.

A new user copies the snippet, defines their tool (``bash_tool_dict``, ``run``), points the
OpenAI client at a model and puts a ``ctxfold.toml`` beside the script. This does exactly that
against ctxfold's loopback emulator (DeepSeek's chat wire, a real HTTP server on 127.0.0.1, no
key) with a 16,000-token window on both sides, and fails unless the snippet:

* runs TURNS model turns without one rejected request (the window's room, not the
  provider's 64K default output reservation, is what a request reserves);
* installs at least two checkpoints (its own ``summarize``, through the same client);
* gets at least one ``use_capability`` call from the model — offered once there is something
  to look up — and answers it through ``cm.answer`` with a real search result;
* leaves a session ``ctxfold sessions list`` shows (the ``[store] path`` of the toml).

CI runs it in a fresh virtualenv after ``pip install . openai`` (``.ci/run``); the test suite
runs it with the development install (``tests/test_readme_snippet.py``). It uses only what
``import ctxfold`` exports.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import ctxfold

README = Path(__file__).resolve().parents[1] / "README.md"
WINDOW = 16_000
TURNS = 30
#: A line every tool output carries, so the model's search has something to find.
NEEDLE = "needle-{n}: the flaky test is tests/test_parse.py::test_tokens"


def readme_snippet() -> str:
    """The first Python block under the README's "Use it in an agent" heading."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Use it in an agent"):]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    if match is None:
        raise SystemExit("README.md: no python block under 'Use it in an agent'")
    return match.group(1)


class Model:
    """The emulated model's script: a bash call per turn, ``use_capability`` (a search of
    the folded history) as soon as it is offered, an answer after TURNS turns."""

    def __init__(self) -> None:
        self.turns = 0
        self.searched = False
        self.offered_at: int | None = None

    def __call__(self, body: dict[str, Any], profile: Any) -> ctxfold.ReplySpec:
        self.turns += 1
        names = [t.get("function", {}).get("name") for t in body.get("tools") or ()]
        if "use_capability" in names and self.offered_at is None:
            self.offered_at = self.turns
        if self.turns >= TURNS:
            return ctxfold.ReplySpec(text="The test is fixed: the tokenizer dropped its last "
                                          "token.")
        if self.offered_at is not None and not self.searched:
            self.searched = True
            arguments = {"action": "call", "capability_id": "session:search",
                         "arguments": {"query": "needle-1 flaky test"}}
            call = ctxfold.ToolCall(id=f"cap_{self.turns}", name="use_capability",
                                    arguments=json.dumps(arguments))
            return ctxfold.ReplySpec(text="", tool_calls=(call,))
        call = ctxfold.ToolCall(id=f"call_{self.turns}", name="bash",
                                arguments=json.dumps({"command": f"pytest -x # {self.turns}"}))
        return ctxfold.ReplySpec(text="", tool_calls=(call,))


bash_tool_dict = {"type": "function", "function": {
    "name": "bash", "description": "Run a shell command in the repository.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}}


def run(call: Any) -> str:
    """The user's own tool: a test log of about 1,800 tokens."""
    n = call.id.rsplit("_", 1)[-1]
    lines = [f"{call.function.arguments}: line {i:03d} collected tests, all green so far "
             "(platform linux, python 3.12, pytest 8)" for i in range(80)]
    return "\n".join([NEEDLE.format(n=n), *lines])


def main() -> int:
    model = Model()
    with ctxfold.Emulator("deepseek", window=WINDOW, script=model) as emu, \
            tempfile.TemporaryDirectory() as workdir:
        os.chdir(workdir)
        Path("ctxfold.toml").write_text(f"[provider]\ncontext_window = {WINDOW}\n"
                                        '[store]\npath = "my-sessions"\n')
        os.environ["OPENAI_BASE_URL"] = emu.base_url
        os.environ["OPENAI_API_KEY"] = "unused-by-the-emulator"
        namespace: dict[str, Any] = {"bash_tool_dict": bash_tool_dict, "run": run}
        exec(compile(readme_snippet(), "README.md", "exec"), namespace)
        cm: ctxfold.ContextManager = namespace["cm"]
        rejected = [r.status for r in emu.requests if r.status != 200]
        installs = [t for t in cm.state.telemetry if t.kind == "install" and
                    t.action == "summary"]
        answered = [m for m in cm.canonical if m.role == "tool" and m.tool_call_id
                    and m.tool_call_id.startswith("cap_")]
        turns = sum(1 for m in cm.canonical if m.role == "assistant")
        listed = subprocess.run([sys.executable, "-m", "ctxfold.cli.main", "sessions", "list",
                                 "--json"], capture_output=True, text=True, check=False)
        print(f"README snippet at a {WINDOW:,}-token window: {turns} turns, "
              f"{len(emu.requests)} requests ({len(rejected)} rejected), {len(installs)} "
              f"checkpoints, use_capability offered at turn {model.offered_at} and answered "
              f"{len(answered)} time(s)")
        problems = []
        if rejected:
            problems.append(f"the provider rejected {len(rejected)} request(s): "
                            f"{rejected[:3]} (the first body's keys: "
                            f"{sorted(emu.requests[0].body)})")
        if turns < TURNS:
            problems.append(f"only {turns} turns, expected {TURNS}")
        if len(installs) < 2:
            problems.append(f"{len(installs)} checkpoint(s) installed, expected at least 2")
        if not answered:
            problems.append("the model's use_capability call was never answered")
        elif not all(json.loads(m.content).get("hits") for m in answered):
            problems.append(f"use_capability answered without a hit: {answered[0].content!r}")
        if listed.returncode != 0 or "my-session" not in listed.stdout:
            problems.append(f"`ctxfold sessions list` does not show the session: "
                            f"{listed.stdout!r} {listed.stderr!r}")
        for problem in problems:
            print(f"newcomer path: {problem}", file=sys.stderr)
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
