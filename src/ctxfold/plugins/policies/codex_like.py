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

Tool outputs: Codex sends the model at most ``MODEL_FORMAT_MAX_BYTES = 10 * 1024`` bytes and
``MODEL_FORMAT_MAX_LINES = 256`` lines of a command's output — the first 128 lines (at most
5 KiB) and the last 128 (at most 5 KiB) around ``[... omitted N of M lines ...]``
(``codex-rs/core/src/tools/mod.rs``, ``format_exec_output_str``; later versions keep about
10,000 bytes or tokens by a per-model ``TruncationPolicy``). Here every tool output is bounded
so when observed; the canonical history keeps it whole.

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
MODEL_FORMAT_MAX_BYTES = 10 * 1024
MODEL_FORMAT_MAX_LINES = 256


def _bytes_prefix(lines: list[str], budget: int) -> list[str]:
    out: list[str] = []
    for line in lines:
        size = len(line.encode()) + 1
        if size > budget:
            if budget > 0:
                out.append(line.encode()[:budget].decode(errors="ignore"))
            break
        out.append(line)
        budget -= size
    return out


def codex_truncate(text: str) -> str:
    """A tool output as Codex shows it to the model: whole when within 10 KiB and 256 lines,
    else its first and last 128 lines, each half within 5 KiB, around an omission marker."""
    lines = text.split("\n")
    if len(lines) <= MODEL_FORMAT_MAX_LINES and len(text.encode()) <= MODEL_FORMAT_MAX_BYTES:
        return text
    half_lines, half_bytes = MODEL_FORMAT_MAX_LINES // 2, MODEL_FORMAT_MAX_BYTES // 2
    head = _bytes_prefix(lines[:half_lines], half_bytes)
    rest = lines[len(head):]
    tail = _bytes_prefix(rest[::-1][:half_lines], half_bytes)[::-1]
    omitted = len(lines) - len(head) - len(tail)
    return "\n".join([*head, f"[... omitted {omitted} of {len(lines)} lines ...]", *tail])


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

    def cap(self, message: Message) -> Message:
        bounded = codex_truncate(message.content)
        return message if bounded == message.content else attrs.evolve(
            message, content=bounded, raw_content=None)

    def view(self) -> list[Message]:
        return self.body + self.sent[self.covered:]

    def request(self) -> PolicyRequest:
        view = self.view()
        if self.tokens(view) < math.floor(self.setup.window * TRIGGER_RATIO):
            return PolicyRequest(messages=tuple(view))
        system = first_system(self.sent)
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
        self.covered = len(self.sent)
        return PolicyRequest(messages=tuple(self.view()), summaries=(call,), installed=True)


def _factory(context: StrategyContext[PolicyOptions]) -> CodexLikePolicy:
    return CodexLikePolicy(context.options)


@hookimpl
def ctxfold_policies() -> list[StrategySpec]:
    """Register the ``codex-like`` policy."""
    return [StrategySpec(name="codex-like", factory=_factory,
                         description="Codex CLI local compaction: at 90% keep user messages "
                                     "(20k tokens) + one summary")]
