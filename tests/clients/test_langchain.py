"""LangChain ``ChatOpenAI`` + ``bind_tools`` (PyPI ``langchain-openai``): an agent loop of
its own kind — one tool, turns alternately streamed (``.stream``) and not (``.invoke``) —
through ``ctxfold serve``, then an edit: the history cut back three turns and continued with
a different message. Configured-key mode (the proxy holds the provider key; the client's key
must not be used).

``ChatOpenAI`` re-serializes each earlier tool call from its parsed ``args`` with
``json.dumps(args, ensure_ascii=False)`` (spaced), whatever the model sent
(``langchain_openai/chat_models/base.py``, ``_lc_tool_call_to_openai_tool_call``); it sends
no conversation id, and asks for streamed usage only on OpenAI's own endpoint
(``stream_usage``).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.clients.harness import (
    TURN,
    Stack,
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

RULES = {"rules": [
    {"when": {"last": "tool"}, "reply": {"text": "Turn " + TURN + ": I have read the filler."}},
    {"when": {"last": "user", "tools": ["read_step"]},
     "reply": {"text": "", "tool_calls": [{"name": "read_step",
                                           "arguments": {"step": "{{match:Turn ([0-9]+)}}"}}]}},
]}

AGENT = textwrap.dedent('''
    import json
    import sys

    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    base_url, key, turns, back = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])


    @tool
    def read_step(step: str) -> str:
        """Return the filler text of one step."""
        return f"CTXFOLD-STEP-{step} " + "lorem ipsum dolor sit amet, consectetur elit " * 110


    model = ChatOpenAI(model="deepseek-flash", base_url=base_url, api_key=key, max_retries=0,
                       timeout=60).bind_tools([read_step])


    def ask(history, stream):
        if not stream:
            return model.invoke(history)
        reply = None
        for chunk in model.stream(history):
            reply = chunk if reply is None else reply + chunk
        return reply


    def turn(history, text, stream):
        history.append(HumanMessage(text))
        for _ in range(4):
            reply = ask(history, stream)
            history.append(reply)
            if not reply.tool_calls:
                return reply.content
            for call in reply.tool_calls:
                history.append(ToolMessage(read_step.invoke(call["args"]),
                                           tool_call_id=call["id"]))
        raise SystemExit("no final answer after 4 rounds")


    history = [SystemMessage("You read filler text with the read_step tool.")]
    answers = []
    starts = []
    for n in range(1, turns + 1):
        starts.append(len(history))
        answers.append(turn(history, f"Turn {n}: read step {n}.", stream=n % 2 == 1))
    # the edit: back to before turn (turns - back + 1), a different message from there
    history = history[: starts[turns - back]]
    answers.append(turn(history, "Instead: read step 99.", stream=True))
    answers.append(turn(history, "And step 100.", stream=False))
    print(json.dumps(answers))
''')


def test_langchain_chat_openai_tool_loop_streamed_and_not_then_an_edit(tmp_path: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    (work / "agent.py").write_text(AGENT)
    with running(Stack(tmp_path / "stack", profile="deepseek", window=6000, rules=RULES,
                       key_mode="configured")) as stack:
        run = run_client([venv_python("lc"), str(work / "agent.py"), stack.base_url,
                          stack.client_key, str(TURNS), str(REWIND_BACK)],
                         env=client_env(home), cwd=work, timeout=240)
    check_run(stack, [run])
    answers = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(answers) == TURNS + 2
    assert all("I have read the filler" in a for a in answers), answers
    rounds = tool_rounds(stack.upstream_requests())
    assert {name for name, _ in rounds} == {"read_step"}
    steps = {out.split()[0] for _, out in rounds}
    assert steps >= {f"CTXFOLD-STEP-{t}" for t in range(1, TURNS + 1)}, sorted(steps)
    assert reached_upstream(stack, "Instead: read step 99.")
    assert reached_upstream(stack, "And step 100.")
