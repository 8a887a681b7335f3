"""Policies ``langchain-summarization`` and ``langchain-summarization-clear``: LangChain 1.x
``SummarizationMiddleware`` (and ``ContextEditingMiddleware`` with ``ClearToolUsesEdit``),
run inside a real ``langchain.agents.create_agent`` graph.

**Library code that runs**: ``create_agent`` (the LangGraph state graph, its model node and
middleware hooks); ``SummarizationMiddleware.before_model`` — trigger, cutoff, the
``trim_messages`` of what is summarized (``trim_tokens_to_summarize=4000``), the summary
``HumanMessage`` and ``RemoveMessage(REMOVE_ALL_MESSAGES)`` applied by LangGraph's
``add_messages`` reducer; ``ContextEditingMiddleware.wrap_model_call`` /
``ClearToolUsesEdit.apply`` on a copy of the request; ``convert_to_openai_messages`` for what
the model node sends.

**Adapter code**: chat dict → LangChain message (``convert_to_messages``); the system message
goes in as ``create_agent(system_prompt=...)``, outside the graph state, as in a normal agent;
a capture chat model records what the model node sends and answers a tool-free "ok" so the
graph ends (that "ok" is dropped from the state, which is kept between requests as a
checkpointer would). The summarizer is the middleware's ``summarizer=`` callable (a documented
option): it receives the trimmed messages; the shared summarizer writes the text; the call is
billed as the middleware's own default prompt over those messages
(``_format_summary_prompt``).

**Settings**: the window is the model profile's ``max_input_tokens``; trigger
``("fraction", 0.8)`` (the library default is no trigger at all); ``keep`` 20 messages and the
4,000-token trim at their defaults; the token counter is the library's default
(``count_tokens_approximately`` scaled by the last ``usage_metadata``), and every recorded
AI message carries the usage a provider reports for the request that produced it (with the
model's provider name in ``response_metadata``), so the middleware's reported-token trigger
sees the whole request — system prompt and tool schemas included — as in a real agent. A
summary the middleware installs without calling its model ("Previous conversation was too
long to summarize.") counts as a summary, unbilled.
``ClearToolUsesEdit``'s 100,000-token trigger is scaled by ``window / 200,000`` below a 200K
window like every peer constant; ``keep=3`` and the ``[cleared]`` placeholder are defaults.
"""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    SummarizationMiddleware,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    SystemMessage,
    convert_to_messages,
)
from langchain_core.messages.utils import convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, ChatResult

from ctxfold.kernel.kinds import PolicyOptions
from ctxfold.plugins.policies._common import scaled
from ctxfold.plugins.policies.peers._adapter import PeerPolicy

CLEAR_TOOL_USES_TRIGGER = 100_000  # ClearToolUsesEdit's default trigger (tokens)
TRIGGER_FRACTION = 0.8
#: How the middleware opens the message that carries its summary (``_build_new_messages``).
SUMMARY_PREFIX = "Here is a summary of the conversation to date:"


class _Capture(BaseChatModel):
    """A chat model that hands what it is sent to ``sink`` and answers "ok"."""

    sink: Any = None

    @property
    def _llm_type(self) -> str:
        return "ctxfold-replay-capture"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.sink(messages)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="ok"))])


class LangChainSummarization(PeerPolicy):
    """``SummarizationMiddleware`` at 80 % of the window, in a ``create_agent`` graph."""

    name = "langchain-summarization"
    clear_tool_uses = False
    summary_prefixes = (SUMMARY_PREFIX,)

    def __init__(self, setup: PolicyOptions) -> None:
        super().__init__(setup)
        self.system: str | None = None
        self.state: list[Any] = []
        self.pending: list[Any] = []
        self.sent: list[dict[str, Any]] = []
        profile: Any = {"max_input_tokens": setup.window}  # a ModelProfile (a TypedDict)
        self.model = _Capture(sink=self._on_model, profile=profile)
        self.provider = self.model._get_ls_params().get("ls_provider")
        self.summarization = SummarizationMiddleware(
            self.model, trigger=("fraction", TRIGGER_FRACTION), summarizer=self._summarize)
        middleware: list[Any] = [self.summarization]
        if self.clear_tool_uses:
            edit = ClearToolUsesEdit(trigger=scaled(CLEAR_TOOL_USES_TRIGGER, setup.window))
            middleware.append(ContextEditingMiddleware(edits=[edit]))
        self.middleware = middleware
        self.graph: Any = None

    def _on_model(self, messages: Any) -> None:
        self.sent = convert_to_openai_messages(list(messages))

    def _summarize(self, messages: Any) -> str:
        prompt = self.summarization._format_summary_prompt(list(messages))
        return self.summarize(convert_to_openai_messages(list(messages)), prompt)

    def feed(self, message: dict[str, Any]) -> None:
        if message["role"] == "system" and self.system is None and not self.state:
            self.system = message.get("content") or ""
            return
        converted = convert_to_messages([message])
        usage = self.usage
        if message["role"] == "assistant" and usage is not None:
            for ai in converted:
                if isinstance(ai, AIMessage):
                    ai.usage_metadata = {
                        "input_tokens": usage.prompt_tokens,
                        "output_tokens": usage.completion_tokens,
                        "total_tokens": usage.prompt_tokens + usage.completion_tokens}
                    ai.response_metadata = {**ai.response_metadata,
                                            "model_provider": self.provider}
            self.usage = None
        self.pending.extend(converted)

    def build(self) -> list[dict[str, Any]]:
        if self.graph is None:
            system = SystemMessage(self.system) if self.system is not None else None
            self.graph = create_agent(self.model, tools=[], middleware=self.middleware,
                                      system_prompt=system)
        calls = len(self._calls)
        before = self.state[0].id if self.state else None
        out = self.graph.invoke({"messages": self.state + self.pending})
        self.pending = []
        final = out["messages"]
        head = final[0] if final else None
        if (isinstance(head, HumanMessage) and head.id != before and len(self._calls) == calls
                and str(head.content).startswith(SUMMARY_PREFIX)):
            self.count_fallback()
        self.state = final[:-1] if final and final[-1].content == "ok" else final
        return self.sent


class LangChainSummarizationClear(LangChainSummarization):
    """The same, with ``ContextEditingMiddleware(ClearToolUsesEdit)`` clearing old tool
    results on the request copy."""

    name = "langchain-summarization-clear"
    clear_tool_uses = True
