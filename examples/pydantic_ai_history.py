"""pydantic-ai: ctxfold as a capability that shapes each model request.

pydantic-ai 2.x runs history processors as capabilities. ``ProcessHistory`` writes its
result back into the run's history, so the next step would start from the folded view; a
capability's ``before_model_request`` changes only what goes on the wire ("request-only
messages"), which is what ctxfold needs: the agent's history stays whole, ctxfold mirrors
it and sends the model the view. The agent's
own model writes the summaries (``pydantic_ai.direct.model_request``). ctxfold's
``use_capability`` is an agent tool (ctxfold's schema, answered by ``cm.use_capability``)
offered from the start: pydantic-ai records a tool that appears mid-run as a history part
of its own (``ToolAvailabilityDeltaPart``), so the tool list is kept fixed and the session is
told the host offers the tool itself. pydantic-ai has no public converter to OpenAI chat
dicts, so the two small functions below map the parts this agent uses. Run it:

    pip install "ctxfold[examples]" && python examples/pydantic_ai_history.py
"""

from __future__ import annotations

import json
import tempfile
from typing import Any

from _support import BASH_TOOL, MODEL, SYSTEM, TASKS, WINDOW, describe, finish, model
from _support import bash as run_bash
from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.direct import model_request
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import ctxfold


def to_chat(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """pydantic-ai messages → OpenAI chat dicts (one per request part, one per response)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            calls = [{"id": p.tool_call_id, "type": "function", "function": {
                "name": p.tool_name, "arguments": p.args_as_json_str()}}
                for p in message.parts if isinstance(p, ToolCallPart)]
            out.append({"role": "assistant", "content": text or None,
                        **({"tool_calls": calls} if calls else {})})
            continue
        for part in message.parts:
            if isinstance(part, SystemPromptPart):
                out.append({"role": "system", "content": part.content})
            elif isinstance(part, UserPromptPart):
                out.append({"role": "user", "content": part.content})
            elif isinstance(part, ToolReturnPart):
                out.append({"role": "tool", "tool_call_id": part.tool_call_id,
                            "name": part.tool_name, "content": part.model_response_str()})
            else:
                raise TypeError(f"this example does not map {type(part).__name__}")
    return out


def from_chat(dicts: list[dict[str, Any]]) -> list[ModelMessage]:
    """OpenAI chat dicts → pydantic-ai messages (consecutive request parts grouped)."""
    out: list[ModelMessage] = []
    for d in dicts:
        if d["role"] == "assistant":
            parts: list[Any] = [TextPart(d["content"])] if d.get("content") else []
            parts += [ToolCallPart(c["function"]["name"], c["function"]["arguments"], c["id"])
                      for c in d.get("tool_calls", [])]
            out.append(ModelResponse(parts=parts))
            continue
        part = (SystemPromptPart(d["content"]) if d["role"] == "system"
                else UserPromptPart(d["content"]) if d["role"] == "user"
                else ToolReturnPart(d.get("name") or "", d["content"], d["tool_call_id"]))
        if out and isinstance(out[-1], ModelRequest):
            out[-1].parts = [*out[-1].parts, part]
        else:
            out.append(ModelRequest(parts=[part]))
    return out


class Ctxfold(AbstractCapability[None]):
    """Mirror the run's messages into a ctxfold session; send the model its view."""

    def __init__(self, cm: ctxfold.ContextManager) -> None:
        self.cm = cm
        self.seen = 0  # chat dicts already appended
        self.calls = 0
        #: The agent's tools as the model last saw them; the summary request reuses them so
        #: that it shares the normal requests' cached prefix.
        self.parameters = ModelRequestParameters()

    async def before_model_request(self, ctx: RunContext[None],
                                    request_context: ModelRequestContext) -> ModelRequestContext:
        chat = to_chat(list(request_context.messages))
        self.cm.append(*chat[self.seen:])
        self.seen = len(chat)
        prepared = await self.cm.aprepare()
        describe(self.calls, prepared)
        self.calls += 1
        request_context.messages = from_chat(prepared.to_openai()["messages"])
        self.parameters = request_context.model_request_parameters
        return request_context


def main() -> None:
    with model() as emu, tempfile.TemporaryDirectory() as sessions:
        chat_model = OpenAIChatModel(MODEL, provider=OpenAIProvider(
            base_url=emu.base_url, api_key="unused-by-the-emulator"))

        async def summarize(request: ctxfold.SummaryRequest) -> str:
            wire = ctxfold.to_openai(request)
            reply = await model_request(
                chat_model, from_chat(wire["messages"]),
                model_settings={"max_tokens": request.max_tokens},
                model_request_parameters=capability.parameters)
            return "".join(p.content for p in reply.parts if isinstance(p, TextPart))

        # The host offers use_capability itself (always), so ctxfold does not add it again.
        cm = ctxfold.open_session("pydantic-ai", store_path=sessions,
                                  tools=[BASH_TOOL, ctxfold.USE_CAPABILITY_TOOL],
                                  window=WINDOW, summarize=summarize)
        capability = Ctxfold(cm)
        spec = ctxfold.USE_CAPABILITY_TOOL  # ctxfold's tool, with ctxfold's schema
        lookup = Tool.from_schema(lambda **arguments: cm.use_capability(arguments),
                                  name=spec.name, description=spec.description,
                                  json_schema=dict(spec.parameters))
        agent = Agent(chat_model, system_prompt=SYSTEM, capabilities=[capability],
                      tools=[lookup])

        @agent.tool_plain
        def bash(command: str) -> str:
            """Run a shell command in the repository."""
            return run_bash(command)

        history: list[ModelMessage] = []
        for task in TASKS:
            result = agent.run_sync(task, message_history=history)
            history = result.all_messages()
            print(f"  assistant: {result.output}")
        chat = to_chat(history)
        cm.append(*chat[capability.seen:])
        finish(cm, emu, host_messages=len(chat))
        assert json.dumps(to_chat(history)[:3]) == json.dumps(
            [ctxfold.message_to_openai(m, local_fields=False) for m in cm.canonical[:3]])


if __name__ == "__main__":
    main()
