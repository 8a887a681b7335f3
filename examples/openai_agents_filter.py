"""The OpenAI Agents SDK: ctxfold as the run's ``call_model_input_filter``.

The SDK calls the filter before every model call with the run's input items (Responses
format, whichever model class is used); the filter appends the items ctxfold has not seen
and returns ``cm.aprepare()``'s view as the input. The agent's instructions stay the SDK's.
ctxfold's ``use_capability`` is a ``FunctionTool`` with ctxfold's schema, answered by
``cm.use_capability`` and enabled only while ``cm.offers_capability`` (the filter cannot
change the tools; ``is_enabled`` can). Summaries go through the same ``AsyncOpenAI`` client
the model uses. Run it:

    pip install "ctxfold[examples]" && python examples/openai_agents_filter.py
"""

from __future__ import annotations

import asyncio
import tempfile
from typing import Any

from _support import MODEL, SYSTEM, TASKS, WINDOW, describe, finish, model
from _support import bash as run_bash
from agents import (
    Agent,
    FunctionTool,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.models.chatcmpl_converter import Converter
from agents.run import CallModelData, ModelInputData
from openai import AsyncOpenAI

import ctxfold


@function_tool
def bash(command: str) -> str:
    """Run a shell command in the repository."""
    return run_bash(command)


def capability_tool(cm: ctxfold.ContextManager) -> FunctionTool:
    """ctxfold's ``use_capability`` as an SDK tool: ctxfold's own schema (the summary
    requests carry it too, so they share the cached prefix), enabled while offered."""
    spec = ctxfold.USE_CAPABILITY_TOOL

    async def invoke(_context: Any, arguments: str) -> str:
        return await asyncio.to_thread(cm.use_capability, arguments)

    return FunctionTool(name=spec.name, description=spec.description,
                        params_json_schema=dict(spec.parameters), on_invoke_tool=invoke,
                        strict_json_schema=False,
                        is_enabled=lambda _context, _agent: cm.offers_capability)


class CtxfoldFilter:
    """Mirror the run's input items into a ctxfold session; give the model its view."""

    def __init__(self, cm: ctxfold.ContextManager) -> None:
        self.cm = cm
        self.seen = 0  # input items already appended
        self.calls = 0

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        items = list(data.model_data.input)
        if not self.cm.canonical and data.model_data.instructions:
            self.cm.append({"role": "system", "content": data.model_data.instructions})
        self.cm.append(*items[self.seen:])
        self.seen = len(items)
        prepared = await self.cm.aprepare()
        describe(self.calls, prepared)
        self.calls += 1
        view = prepared.to_responses()["input"][1:]  # the instructions stay the SDK's
        return ModelInputData(input=view, instructions=data.model_data.instructions)


async def main() -> None:
    set_tracing_disabled(True)  # no trace upload from an offline example
    with model() as emu, tempfile.TemporaryDirectory() as sessions:
        client = AsyncOpenAI(base_url=emu.base_url, api_key="unused-by-the-emulator")

        async def summarize(request: ctxfold.SummaryRequest) -> str:
            reply = await client.chat.completions.create(
                model=MODEL, max_tokens=request.max_tokens, **ctxfold.to_openai(request))
            return reply.choices[0].message.content or ""

        # The tools as the SDK sends them, so the summary request shares the cached prefix.
        tools = [Converter.tool_to_openai(bash)]
        cm = ctxfold.open_session("openai-agents", store_path=sessions, tools=tools,
                                  window=WINDOW, summarize=summarize)
        input_filter = CtxfoldFilter(cm)
        agent = Agent(name="coder", instructions=SYSTEM, tools=[bash, capability_tool(cm)],
                      model=OpenAIChatCompletionsModel(MODEL, openai_client=client))
        config = RunConfig(call_model_input_filter=input_filter)
        items: list[Any] = []
        for task in TASKS:
            result = await Runner.run(agent, [*items, {"role": "user", "content": task}],
                                      run_config=config)
            items = result.to_input_list()
            print(f"  assistant: {result.final_output}")
        cm.append(*items[input_filter.seen:])
        finish(cm, emu, host_messages=1 + len(items))  # + the instructions


if __name__ == "__main__":
    asyncio.run(main())
