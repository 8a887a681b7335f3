"""An agent framework's own client loop through ``ctxfold serve``: the OpenAI Agents SDK
runner (the ``peers`` extra) runs a multi-turn tool loop against the proxy at a small window,
so a checkpoint is installed mid-run; the canonical transcript then holds every message the
SDK sent, byte for byte, and the SDK never sees the proxy's ``use_capability`` call.

Marked ``peers``: CI runs it in the peers step, where the SDK is installed (required there).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.serve.conftest import call, log_text, serving

import ctxfold
from ctxfold import ReplySpec
from ctxfold.interop.coerce import to_messages
from ctxfold.serve.sessions import USE_CAPABILITY, reconcile

pytestmark = pytest.mark.peers

TASKS = ("Find why the build fails.", "Fix it and rebuild.")


def script() -> list[ReplySpec]:
    replies: list[ReplySpec] = []
    for t in range(len(TASKS)):
        replies.append(call(f"call_{t}0", command="make"))
        replies.append(call(f"cap_{t}", USE_CAPABILITY, action="list"))
        replies += [call(f"call_{t}{k}", command=f"make step{k}") for k in range(1, 5)]
        replies.append(ReplySpec(text=f"Task {t + 1} done."))
    return replies


def test_the_agents_sdk_runner_loops_through_the_proxy(tmp_path: Path) -> None:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool
    def bash(command: str) -> str:
        """Run a shell command."""
        return log_text(3000, command)

    sent: list[dict[str, Any]] = []
    headers: list[httpx.Headers] = []

    async def on_request(request: httpx.Request) -> None:
        sent.append(json.loads(request.content))

    async def on_response(response: httpx.Response) -> None:
        headers.append(response.headers)

    async def run(base_url: str) -> list[Any]:
        http = httpx.AsyncClient(event_hooks={"request": [on_request],
                                              "response": [on_response]})
        client = AsyncOpenAI(base_url=base_url, api_key="sk-agent", http_client=http,
                             max_retries=0)
        agent = Agent(name="coder", instructions="You are a coding agent.", tools=[bash],
                      model=OpenAIChatCompletionsModel("deepseek-flash", openai_client=client))
        items: list[Any] = []
        answers = []
        for task in TASKS:
            result = await Runner.run(agent, [*items, {"role": "user", "content": task}])
            answers.append(result.final_output)
            items = result.to_input_list()
        await http.aclose()
        return answers

    with serving(tmp_path) as serve:
        served = serve(script=script(), window=6000)
        answers = asyncio.run(run(served.base))
        canonical = served.canonical(headers[-1]["x-ctxfold-session"])
        bodies = list(served.bodies)
    assert answers == ["Task 1 done.", "Task 2 done."]
    assert "summary" in [h["x-ctxfold-action"] for h in headers]
    assert len({h["x-ctxfold-session"] for h in headers}) == 1
    # The SDK never saw use_capability (it would have failed on an unknown tool).
    assert USE_CAPABILITY not in json.dumps(sent[-1]["messages"])
    assert [t["function"]["name"] for t in sent[-1]["tools"]] == ["bash"]
    assert sum(1 for m in canonical for c in m.tool_calls if c.name == USE_CAPABILITY) == 2
    # Every message the SDK sent is in the canonical transcript, byte for byte.
    history = sent[-1]["messages"]
    answer = {"role": "assistant", "content": answers[-1]}  # the one reply not resent
    client = to_messages([*history, answer])
    plan = reconcile(canonical, client)
    assert plan.extends and plan.matched == len(client)
    kept = [ctxfold.message_to_openai(m, local_fields=False) for m in canonical
            if m.role != "assistant" and m.name != USE_CAPABILITY]
    assert kept == [m for m in history if m["role"] != "assistant"]
    # Upstream got the view: after the checkpoint, less than the SDK's whole history.
    assert len(json.loads(bodies[-1])["messages"]) < len(history)
