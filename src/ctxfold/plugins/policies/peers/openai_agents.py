"""Policy ``openai-agents-trimmer``: the OpenAI Agents SDK's ``ToolOutputTrimmer``.

**Library code that runs**: ``ToolOutputTrimmer.__call__`` — a ``call_model_input_filter`` —
on a ``CallModelData``/``ModelInputData`` built as the Runner builds it (a copy of the input
items and the agent's instructions): ``recent_turns=2`` user turns untouched, older tool
outputs over 500 characters replaced by a 200-character preview; then
``Converter.items_to_messages``, what ``OpenAIChatCompletionsModel`` sends.

**Adapter code**: chat dict → Responses input items (user → easy message; assistant → an output
``message`` item and ``function_call`` items; tool → ``function_call_output``; the system
message → ``instructions``, sent again as the first system message). Constants are the
library's defaults; the trimmer does not look at the window, so a session that outgrows it
overflows.
"""

from __future__ import annotations

from typing import Any

from agents import Agent
from agents.extensions import ToolOutputTrimmer
from agents.models.chatcmpl_converter import Converter
from agents.run_config import CallModelData, ModelInputData

from ctxfold.kernel.kinds import PolicyOptions
from ctxfold.plugins.policies.peers._adapter import PeerPolicy


def to_items(message: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """One chat dict as the Responses input items the SDK keeps."""
    role, content = message["role"], message.get("content") or ""
    if role == "user":
        return [{"role": "user", "content": content}]
    if role == "tool":
        return [{"type": "function_call_output", "call_id": message.get("tool_call_id") or "",
                 "output": content}]
    out: list[dict[str, Any]] = []
    if content:
        out.append({"type": "message", "role": "assistant", "id": f"msg_{n}",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": content, "annotations": []}]})
    for call in message.get("tool_calls") or []:
        out.append({"type": "function_call", "call_id": call["id"],
                    "name": call["function"]["name"], "arguments": call["function"]["arguments"]})
    return out


class OpenAIAgentsTrimmer(PeerPolicy):
    """``ToolOutputTrimmer`` as the run's model-input filter."""

    name = "openai-agents-trimmer"

    def __init__(self, setup: PolicyOptions) -> None:
        super().__init__(setup)
        self.instructions: str | None = None
        self.items: list[dict[str, Any]] = []
        self.n = 0
        self.filter = ToolOutputTrimmer()
        self.agent: Agent[Any] = Agent(name="replay")

    def feed(self, message: dict[str, Any]) -> None:
        if message["role"] == "system" and self.instructions is None:
            self.instructions = message.get("content") or ""
            return
        self.n += 1
        self.items.extend(to_items(message, self.n))

    def build(self) -> list[dict[str, Any]]:
        items: list[Any] = list(self.items)  # Responses input items, as dicts
        data = CallModelData(model_data=ModelInputData(input=items,
                                                       instructions=self.instructions),
                             agent=self.agent, context=None)
        out = self.filter(data)
        head = [{"role": "system", "content": out.instructions}] if out.instructions else []
        return head + [dict(m) for m in Converter.items_to_messages(out.input)]
