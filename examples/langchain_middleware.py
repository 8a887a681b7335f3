"""LangChain / LangGraph: ctxfold as agent middleware around each model call.

``create_agent`` keeps the full conversation in the graph state; the middleware appends the
messages ctxfold has not seen yet, and sends the model ``cm.prepare()``'s view instead of
the whole state (``wrap_model_call`` changes the request only, never the state). ctxfold's
``use_capability`` is an agent tool like ``bash`` (same schema, answered by
``cm.use_capability``); the middleware offers it only when ``prepared.offers_capability``.
The agent's own model writes the summaries. Run it:

    pip install "ctxfold[examples]" && python examples/langchain_middleware.py
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

from _support import MODEL, SYSTEM, TASKS, WINDOW, describe, finish, model
from _support import bash as run_bash
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import convert_to_messages, convert_to_openai_messages
from langchain_core.tools import StructuredTool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_openai import ChatOpenAI

import ctxfold


@tool
def bash(command: str) -> str:
    """Run a shell command in the repository."""
    return run_bash(command)


def capability_tool(cm: ctxfold.ContextManager) -> StructuredTool:
    """ctxfold's ``use_capability`` as a LangChain tool, with ctxfold's own schema (so the
    summary requests, which carry it, share the normal requests' cached prefix)."""
    spec = ctxfold.USE_CAPABILITY_TOOL
    return StructuredTool.from_function(
        func=lambda **arguments: cm.use_capability(arguments), name=spec.name,
        description=spec.description, args_schema=dict(spec.parameters))


class CtxfoldMiddleware(AgentMiddleware):
    """Mirror the agent's messages into a ctxfold session; send the model its view."""

    def __init__(self, cm: ctxfold.ContextManager) -> None:
        super().__init__()
        self.cm = cm
        self.seen = 0  # state messages already appended
        self.calls = 0

    def wrap_model_call(self, request: ModelRequest,
                        handler: Callable[[ModelRequest], ModelResponse]) -> ModelResponse:
        if not self.cm.canonical and request.system_message is not None:
            self.cm.append({"role": "system", "content": request.system_message.content})
        self.cm.append(*convert_to_openai_messages(request.messages[self.seen:]))
        self.seen = len(request.messages)
        prepared = self.cm.prepare()
        describe(self.calls, prepared)
        self.calls += 1
        view = prepared.to_openai()["messages"][1:]  # the system prompt stays LangChain's
        # use_capability only when there is something to look up, as to_openai() does.
        tools = [t for t in request.tools if getattr(t, "name", "") != "use_capability"
                 or prepared.offers_capability]
        response = handler(request.override(messages=convert_to_messages(view), tools=tools))
        usage = response.result[-1].response_metadata.get("token_usage")
        if usage:
            self.cm.observe_usage(usage)
        return response


def main() -> None:
    with model() as emu, tempfile.TemporaryDirectory() as sessions:
        llm = ChatOpenAI(model=MODEL, base_url=emu.base_url, api_key="unused-by-the-emulator")

        def summarize(request: ctxfold.SummaryRequest) -> str:
            wire = ctxfold.to_openai(request)
            bound = llm.bind_tools(wire.get("tools", []), tool_choice="none")
            reply = bound.invoke(convert_to_messages(wire["messages"]),
                                 max_tokens=request.max_tokens)
            return str(reply.content)

        cm = ctxfold.open_session("langchain", store_path=sessions, window=WINDOW,
                                  tools=[convert_to_openai_tool(bash)], summarize=summarize)
        middleware = CtxfoldMiddleware(cm)
        agent = create_agent(llm, [bash, capability_tool(cm)], system_prompt=SYSTEM,
                             middleware=[middleware])
        state: dict[str, Any] = {"messages": []}
        for task in TASKS:
            state = agent.invoke({"messages": [*state["messages"],
                                               {"role": "user", "content": task}]})
            print(f"  assistant: {state['messages'][-1].content}")
        cm.append(*convert_to_openai_messages(state["messages"][middleware.seen:]))
        finish(cm, emu, host_messages=1 + len(state["messages"]))  # + the system prompt


if __name__ == "__main__":
    main()
