"""Replay policies that run the real libraries (the ``peers`` extra).

Each policy drives the library's own compaction code offline through a small adapter (each
module's docstring says what is the library's and what is the adapter's). They are registered
whether or not the libraries are installed, so ``ctxfold plugins`` and ``--policy all`` can say
what is missing; a factory imports its library only when the policy is built.
"""

from __future__ import annotations

import importlib
from typing import Any

from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import PolicyOptions, StrategyContext, StrategySpec
from ctxfold.plugins.policies.peers._adapter import INSTALL

#: name → (module, class, required top-level modules, description)
PEERS: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    "langchain-summarization": (
        "langchain", "LangChainSummarization", ("langchain", "langgraph"),
        "LangChain SummarizationMiddleware (80% trigger, keep 20 messages) in create_agent"),
    "langchain-summarization-clear": (
        "langchain", "LangChainSummarizationClear", ("langchain", "langgraph"),
        "LangChain SummarizationMiddleware + ContextEditingMiddleware(ClearToolUsesEdit)"),
    "pydantic-ai-harness": (
        "pydantic_ai_harness", "PydanticAIHarness", ("pydantic_ai", "pydantic_ai_harness"),
        "pydantic-ai-harness TieredCompaction (dedupe reads, clear tool results, summarize)"),
    "openai-agents-trimmer": (
        "openai_agents", "OpenAIAgentsTrimmer", ("agents",),
        "OpenAI Agents SDK ToolOutputTrimmer (call_model_input_filter)"),
}


def _factory(name: str) -> Any:
    module, cls, _requires, _description = PEERS[name]

    def build(context: StrategyContext[PolicyOptions]) -> Any:
        policy_module = importlib.import_module(f"ctxfold.plugins.policies.peers.{module}")
        return getattr(policy_module, cls)(context.options)

    return build


@hookimpl
def ctxfold_policies() -> list[StrategySpec]:
    """Register the real-library policies (available when the ``peers`` extra is installed)."""
    return [StrategySpec(name=name, factory=_factory(name),
                         description=description, requires=requires, install=INSTALL)
            for name, (_module, _cls, requires, description) in PEERS.items()]
