"""Policy ``codex-like``: OpenAI Codex CLI's local ("inline") compaction (peers.md §1).

* Trigger: ``auto_compact_token_limit`` = 90 % of the context window (peers.md §1
  "Trigger", ``codex-rs/protocol/src/openai_models.rs``).
* Summary request: the whole visible history + the compaction prompt, same tools (Codex v2
  sends "the exact normal-turn prefix"); when it does not fit, the oldest items are dropped
  (the local path's retry on ``ContextWindowExceeded``).
* New history: the initial context (system message) re-injected, then real user messages
  collected newest-first within ``COMPACT_USER_MESSAGE_MAX_TOKENS = 20_000`` tokens (the one
  that overflows the budget is middle-truncated, older ones dropped), then one user-role
  summary message. All assistant messages, tool calls and outputs are dropped
  (``codex-rs/core/src/compact.rs``).

Scaling: the 20 000-token user budget is scaled by ``window / 200_000`` below a 200K window
(:func:`ctxfold.plugins.policies._common.scaled`); the 90 % trigger is a ratio and is not scaled.
"""

from __future__ import annotations

import math

import attrs

from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import PolicyOptions, StrategyContext, StrategySpec
from ctxfold.kernel.sessions import PolicyRequest
from ctxfold.kernel.summary import is_summary_message
from ctxfold.kernel.types import Message
from ctxfold.plugins.policies._common import BasePolicy, first_system, scaled

TRIGGER_RATIO = 0.90
USER_MESSAGE_MAX_TOKENS = 20_000


def middle_truncate(message: Message, keep_tokens: int, tokens: int) -> Message:
    """``message`` cut to about ``keep_tokens`` of its ``tokens``: head and tail halves around a
    ``…N tokens truncated…`` marker (Codex's 50/50 split)."""
    text = message.content
    keep_chars = max(0, int(len(text) * keep_tokens / max(tokens, 1)))
    half = keep_chars // 2
    marker = f"…{max(tokens - keep_tokens, 0)} tokens truncated…"
    return attrs.evolve(message, content=text[:half] + marker + text[len(text) - half:])


class CodexLikePolicy(BasePolicy):
    """Summary + recent user messages at 90 % of the window."""

    name = "codex-like"

    def __init__(self, setup: PolicyOptions) -> None:
        super().__init__(setup)
        self.body: list[Message] = []
        self.covered = 0
        self.user_budget = scaled(USER_MESSAGE_MAX_TOKENS, setup.window)

    def view(self) -> list[Message]:
        return self.body + self.history[self.covered:]

    def request(self) -> PolicyRequest:
        view = self.view()
        if self.tokens(view) < math.floor(self.setup.window * TRIGGER_RATIO):
            return PolicyRequest(messages=tuple(view))
        system = first_system(self.history)
        region = view[1:] if system is not None and view and view[0] is system else view
        call, summary = self.summarize(self.summary_request(system, region))
        kept: list[Message] = []
        budget = self.user_budget
        for message in reversed(view):
            if message.role != "user" or message.origin != "user" or is_summary_message(message):
                continue
            tokens = self.count(message)
            if tokens > budget:
                if budget > 0:
                    kept.append(middle_truncate(message, budget, tokens))
                break
            kept.append(message)
            budget -= tokens
        self.body = ([system] if system is not None else []) + kept[::-1] + [summary]
        self.covered = len(self.history)
        return PolicyRequest(messages=tuple(self.view()), summaries=(call,), installed=True)


def _factory(context: StrategyContext[PolicyOptions]) -> CodexLikePolicy:
    return CodexLikePolicy(context.options)


@hookimpl
def ctxfold_policies() -> list[StrategySpec]:
    """Register the ``codex-like`` policy."""
    return [StrategySpec(kind="policy", name="codex-like", factory=_factory,
                         description="Codex CLI local compaction: at 90% keep user messages "
                                     "(20k tokens) + one summary")]
