"""Policy ``opencode-like``: opencode's prune + summary (peers.md §3, V1 ``compaction.ts``).

* Prune (no model call), before every request: walk the tool results since the last summary
  from the newest backwards; everything beyond the newest ``PRUNE_PROTECT = 40_000`` tokens
  of tool output is replaced by "[Old tool result content cleared]", but only when more than
  ``PRUNE_MINIMUM = 20_000`` tokens would be freed. Cleared results stay cleared.
* Summary at the overflow threshold: usable = window − reserved, reserved =
  ``COMPACTION_BUFFER = 20_000`` (opencode: min(20 000, model max output)). The summary request
  is the full visible conversation + the instruction, with the same tools (opencode's docs:
  sending the full conversation lets the summary reuse the prompt cache). The new history is
  system + summary + the last real user message replayed (V1 on auto compaction).

Tool outputs: every tool's output is bounded to ``Truncate.MAX_LINES = 2000`` lines and
``Truncate.MAX_BYTES = 50 * 1024`` bytes before the model sees it — the head is kept, then
``...N lines|bytes truncated...`` and a hint that the full output was saved to a file
(``packages/opencode/src/tool/truncation.ts``, ``Truncate.output``). The saved file (kept 7
days) is readable with opencode's own tools; the replay does not model reading it back.

Deviations, documented: opencode V1 skips the last two user turns when pruning and prunes
only after the prompt loop exits; single-task agent sessions have one user turn and never
exit the loop, so that rule would never fire — here the 40 000-token protection alone guards
recent work and the check runs before every request. All three constants are scaled by
``window / 200_000`` below a 200K window (:func:`ctxfold.plugins.policies._common.scaled`).
The buffer is opencode's output reservation: under the replay's one output reservation it
comes off the model's window once, not twice (``max(0, buffer − reserve_output)`` off the
input budget).
"""

from __future__ import annotations

import attrs

from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import PolicyOptions, StrategyContext, StrategySpec
from ctxfold.kernel.sessions import PolicyRequest, SummaryCall
from ctxfold.kernel.summary import is_summary_message
from ctxfold.kernel.types import Message
from ctxfold.plugins.policies._common import BasePolicy, first_system, scaled

PRUNE_PROTECT = 40_000
PRUNE_MINIMUM = 20_000
COMPACTION_BUFFER = 20_000
CLEARED = "[Old tool result content cleared]"
MAX_LINES = 2000
MAX_BYTES = 50 * 1024
TRUNCATED_HINT = ("The tool call succeeded but the output was truncated. Full output saved to: "
                  "{path}\nUse Grep to search the full content or Read with offset/limit to "
                  "view specific sections.")


def opencode_truncate(text: str, path: str = "tool-output") -> str:
    """A tool output as opencode shows it: whole within 2,000 lines and 50 KiB, else the
    lines that fit (head first) with the removed count and the saved-file hint."""
    lines = text.split("\n")
    total = len(text.encode())
    if len(lines) <= MAX_LINES and total <= MAX_BYTES:
        return text
    out: list[str] = []
    used, hit_bytes = 0, False
    for i, line in enumerate(lines[:MAX_LINES]):
        size = len(line.encode()) + (1 if i else 0)
        if used + size > MAX_BYTES:
            hit_bytes = True
            break
        out.append(line)
        used += size
    removed = total - used if hit_bytes else len(lines) - len(out)
    unit = "bytes" if hit_bytes else "lines"
    return (f"{chr(10).join(out)}\n\n...{removed} {unit} truncated...\n\n"
            + TRUNCATED_HINT.format(path=path))


class OpencodeLikePolicy(BasePolicy):
    """Prune old tool outputs, then summarize at the overflow threshold."""

    name = "opencode-like"

    def __init__(self, setup: PolicyOptions) -> None:
        super().__init__(setup)
        self.body: list[Message] = []
        self.covered = 0
        self.pruned: set[int] = set()  # history indices of cleared tool results
        self.protect = scaled(PRUNE_PROTECT, setup.window)
        self.minimum = scaled(PRUNE_MINIMUM, setup.window)
        # opencode reserves its buffer for output; the replay's output reservation is already
        # off the budget, so only what opencode reserves beyond it comes off again.
        self.buffer = max(0, scaled(COMPACTION_BUFFER, setup.model_window) - setup.reserve_output)

    def cap(self, message: Message) -> Message:
        bounded = opencode_truncate(message.content, f"tool-output/{message.tool_call_id}")
        return message if bounded == message.content else attrs.evolve(
            message, content=bounded, raw_content=None)

    def view(self) -> list[Message]:
        tail = [
            attrs.evolve(m, content=CLEARED, raw_content=None) if i in self.pruned else m
            for i, m in enumerate(self.sent[self.covered:], start=self.covered)
        ]
        return self.body + tail

    def prune(self) -> bool:
        protected = 0
        candidates: list[tuple[int, int]] = []
        for i in range(len(self.sent) - 1, self.covered - 1, -1):
            message = self.sent[i]
            if message.role != "tool" or i in self.pruned:
                continue
            tokens = self.count(message)
            if protected < self.protect:
                protected += tokens
                continue
            candidates.append((i, tokens))
        if sum(t for _i, t in candidates) <= self.minimum:
            return False
        self.pruned.update(i for i, _t in candidates)
        return True

    def request(self) -> PolicyRequest:
        pruned = self.prune()
        view = self.view()
        calls: tuple[SummaryCall, ...] = ()
        if self.tokens(view) >= self.setup.window - self.buffer:
            system = first_system(self.sent)
            region = view[1:] if system is not None and view and view[0] is system else view
            call, summary = self.summarize(self.summary_request(system, region))
            calls = (call,)
            last_user = next(
                (m for m in reversed(view)
                 if m.role == "user" and m.origin == "user" and not is_summary_message(m)),
                None,
            )
            self.body = [m for m in (system, summary, last_user) if m is not None]
            self.covered = len(self.sent)
            view = self.view()
        return PolicyRequest(messages=tuple(view), summaries=calls,
                             installed=pruned or bool(calls), prunes=int(pruned))


def _factory(context: StrategyContext[PolicyOptions]) -> OpencodeLikePolicy:
    return OpencodeLikePolicy(context.options)


@hookimpl
def ctxfold_policies() -> list[StrategySpec]:
    """Register the ``opencode-like`` policy."""
    return [StrategySpec(name="opencode-like", factory=_factory,
                         description="opencode: prune tool outputs beyond the newest 40k "
                                     "tokens, summary at window - 20k")]
