"""Policy ``pydantic-ai-harness``: pydantic-ai-harness ``TieredCompaction`` inside a real
pydantic-ai ``Agent.run``.

**Library code that runs**: ``Agent.run(message_history=...)`` with the capability attached, so
its ``before_model_request`` decides and edits: ``DeduplicateFileReads``, ``ClearToolResults``
(``keep_pairs=3``), ``SummarizingCompaction`` (trigger, ``find_safe_cutoff``, the first user
message kept, the incremental ``<previous-summary>``), with ``target_fraction=0.8`` — the
README's recommended stack; the edits persist into the run history, as in the library.
The model is a real ``OpenAIChatModel`` whose ``AsyncOpenAI`` client has an
``httpx2.MockTransport``: the body pydantic-ai would POST to ``/chat/completions`` is captured,
and its ``messages`` are the request. No network.

**Adapter code**: chat dict → ``ModelRequest``/``ModelResponse`` parts (system →
``SystemPromptPart``, user → ``UserPromptPart``, assistant → ``TextPart`` + ``ToolCallPart``,
tool → ``ToolReturnPart``; consecutive request parts share one ``ModelRequest`` as pydantic-ai
stores them). The captured model answers "ok", dropped from ``all_messages()``. A recorded
assistant → assistant step gets an empty ``UserPromptPart`` (pydantic-ai makes no request after
a text-only response). The summarizing tier's ``_summarize`` is overridden: the shared
summarizer writes the text from the messages the library selected, and the call is billed as
the library's own prompt (``format_transcript`` + its summary prompt + the previous summary).
The file key for de-duplication is the ``path``/``file_path`` argument of read-like tools.
Each recorded ``ModelResponse`` carries the usage a provider reports for the request that
produced it (``RequestUsage``), which the library's context estimate anchors on; the previous
summary goes to the summarizer as a summary to merge, and tool calls are part of what it sees.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2  # the HTTP library of openai 3.x: its client takes only httpx2 clients
from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import RequestUsage
from pydantic_ai_harness.compaction import (
    ClearToolResults,
    DeduplicateFileReads,
    SummarizingCompaction,
    TieredCompaction,
)
from pydantic_ai_harness.compaction._summarizing_compaction import (
    SUMMARY_PREFIX,
    format_transcript,
)

from ctxfold.kernel.kinds import PolicyOptions
from ctxfold.plugins.policies.peers._adapter import PeerPolicy

READ_TOOLS = ("read", "read_file", "view", "cat")


def _captured_model(answer: Any) -> OpenAIChatModel:
    def handler(request: httpx2.Request) -> httpx2.Response:
        text = answer(json.loads(request.content)["messages"])
        return httpx2.Response(200, json={
            "id": "replay", "object": "chat.completion", "created": 0, "model": "replay",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}]})

    client = AsyncOpenAI(api_key="offline", base_url="http://127.0.0.1:9/v1",
                         http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)))
    return OpenAIChatModel("replay", provider=OpenAIProvider(openai_client=client))


def file_key(call: ToolCallPart) -> str | None:
    """Which file a read-like tool call reads (``None`` for other calls)."""
    args = call.args_as_dict()
    if call.tool_name.lower() in READ_TOOLS or args.get("command") == "view":
        path = args.get("path") or args.get("file_path")
        if isinstance(path, str):
            return f"{path}:{args.get('view_range') or args.get('offset')}"
    return None


class _Summarizing(SummarizingCompaction):
    """The library's summarizing tier, writing through the replay's shared summarizer."""

    policy: Any = None

    async def _summarize(self, messages: Any, ctx: Any, *, previous_summary: str | None = None
                         ) -> str:
        prompt = self.summary_prompt.format(messages=format_transcript(
            messages, skip_previous_summary=previous_summary is not None,
            tool_return_max_chars=self.tool_return_max_chars))
        if previous_summary is not None:
            prompt += f"\n\n<previous-summary>\n{previous_summary}\n</previous-summary>"
        selected = to_chat(messages)
        if previous_summary is not None:  # merged as a previous summary, not a task
            selected.insert(0, {"role": "user", "content": SUMMARY_PREFIX + previous_summary})
        text: str = self.policy.summarize(selected, prompt)
        return text


def to_chat(messages: Any) -> list[dict[str, Any]]:
    """pydantic-ai messages as chat dicts (the parts this adapter feeds)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            calls = [{"id": p.tool_call_id, "type": "function",
                      "function": {"name": p.tool_name, "arguments": p.args_as_json_str()}}
                     for p in message.parts if isinstance(p, ToolCallPart)]
            out.append({"role": "assistant", "content": text, **(
                {"tool_calls": calls} if calls else {})})
            continue
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                out.append({"role": "tool", "tool_call_id": part.tool_call_id,
                            "content": part.model_response_str()})
            elif isinstance(part, SystemPromptPart | UserPromptPart):
                role = "system" if isinstance(part, SystemPromptPart) else "user"
                out.append({"role": role, "content": str(part.content)})
    return out


class PydanticAIHarness(PeerPolicy):
    """``TieredCompaction`` (dedupe, clear tool results, summarize) at 80 % of the window."""

    name = "pydantic-ai-harness"
    summary_prefixes = (SUMMARY_PREFIX,)

    def __init__(self, setup: PolicyOptions) -> None:
        super().__init__(setup)
        self.sent: list[dict[str, Any]] = []
        summarizing = _Summarizing(model=_captured_model(lambda _m: "unused"), max_messages=1,
                                   keep_messages=20, tokenizer=self.count_text)
        summarizing.policy = self
        capability = TieredCompaction(
            tiers=[DeduplicateFileReads(file_key=file_key, tokenizer=self.count_text),
                   ClearToolResults(max_tokens=1, keep_pairs=3, tokenizer=self.count_text),
                   summarizing],
            target_fraction=0.8, context_window=setup.window, tokenizer=self.count_text)
        self.agent = Agent(_captured_model(self._on_model), capabilities=[capability])
        self.run_history: list[Any] = []
        self.names: dict[str, str] = {}
        self.loop = asyncio.new_event_loop()

    def _on_model(self, messages: list[dict[str, Any]]) -> str:
        self.sent = messages
        return "ok"

    def _request_parts(self) -> list[Any]:
        if not self.run_history or not isinstance(self.run_history[-1], ModelRequest):
            self.run_history.append(ModelRequest(parts=[]))
        parts: list[Any] = self.run_history[-1].parts
        return parts

    def feed(self, message: dict[str, Any]) -> None:
        role, content = message["role"], message.get("content") or ""
        if role == "system":
            self._request_parts().append(SystemPromptPart(content))
        elif role == "user":
            self._request_parts().append(UserPromptPart(content))
        elif role == "tool":
            call_id = message.get("tool_call_id") or ""
            self._request_parts().append(
                ToolReturnPart(self.names.get(call_id, "tool"), content, call_id))
        else:
            parts: list[Any] = [TextPart(content)] if content else []
            for call in message.get("tool_calls") or []:
                self.names[call["id"]] = call["function"]["name"]
                parts.append(ToolCallPart(call["function"]["name"], call["function"]["arguments"],
                                          call["id"]))
            usage, self.usage = self.usage, None
            self.run_history.append(ModelResponse(
                parts=parts or [TextPart("")],
                usage=RequestUsage(input_tokens=usage.prompt_tokens,
                                   output_tokens=usage.completion_tokens)
                if usage is not None else RequestUsage()))

    def build(self) -> list[dict[str, Any]]:
        if not self.run_history or isinstance(self.run_history[-1], ModelResponse):
            self._request_parts().append(UserPromptPart(""))
        self.sent = []
        result = self.loop.run_until_complete(self.agent.run(message_history=self.run_history))
        everything = result.all_messages()
        self.run_history = list(everything[:-1])
        return self.sent
