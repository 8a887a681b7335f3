"""Policy ``openhands-like``: OpenHands' LLMSummarizingCondenser (peers.md §4).

The server default pipeline ends in ``LLMSummarizing(keep_first=4, max_size=120)``
(``openhands/server/session/session.py``). When the view holds more than ``max_size`` events
(here: messages), the condenser keeps the first ``keep_first`` events, puts one summary at
that offset and keeps the newest ``max_size // 2 − keep_first − 1`` events; the forgotten
middle (each event middle-truncated to ``max_event_length = 10_000`` characters) plus the
previous summary is summarized. A context-window error also triggers a condensation
(``CondensationRequestAction``); here: a view at or above ``window − 256``, condensed so the
newest events within half the window stay (SDK V1's token reason, peers.md §4).

The condenser's request is its own prompt (OpenHands forces ``caching_prompt = False`` for
it): forgotten events + instruction, no system message and no tools, so it does not share
the conversation's cached prefix. Event counts are not scaled with the window.

Deviation, documented: the kept head is extended over the tool results of its last
assistant call and the tail never starts on a tool result, so no call or result is orphaned
(the OpenHands SDK respects such "manipulation indices" too).
"""

from __future__ import annotations

import attrs

from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import PolicyOptions, StrategyContext, StrategySpec
from ctxfold.kernel.sessions import PolicyRequest
from ctxfold.kernel.summary import summary_instruction, summary_output_cap
from ctxfold.kernel.types import Message, SummaryRequest
from ctxfold.plugins.policies._common import BasePolicy, constants

KEEP_FIRST = 4
MAX_SIZE = 120
MAX_EVENT_LENGTH = 10_000


def clip_event(message: Message, limit: int = MAX_EVENT_LENGTH) -> Message:
    """``message`` with its content middle-truncated to ``limit`` characters."""
    text = message.content
    if len(text) <= limit:
        return message
    half = limit // 2
    return attrs.evolve(message, content=text[:half] + "\n... (truncated) ...\n" + text[-half:],
                        raw_content=None)


class OpenHandsLikePolicy(BasePolicy):
    """Event-count condenser with a rolling summary."""

    name = "openhands-like"

    def __init__(self, setup: PolicyOptions, keep_first: int = KEEP_FIRST,
                 max_size: int = MAX_SIZE) -> None:
        super().__init__(setup)
        self.keep_first = keep_first
        self.max_size = max_size
        self.body: list[Message] = []
        self.covered = 0

    def view(self) -> list[Message]:
        return self.body + self.history[self.covered:]

    def condense(
        self, view: list[Message], by_tokens: bool
    ) -> tuple[list[Message], list[Message], SummaryRequest] | None:
        """Plan a condensation: (kept head, kept tail, summary request), or ``None``.

        By event count the tail is the newest ``max_size // 2 − keep_first − 1`` events; on a
        context-window overflow it is the newest events within half the window (the SDK's
        token reason "cuts to half of max_tokens").
        """
        head_end = min(self.keep_first, len(view))
        while head_end < len(view) and view[head_end].role == "tool":
            head_end += 1  # keep the results of the head's last call with it
        keep_tail = max(1, self.max_size // 2 - self.keep_first - 1)
        tail_start = max(head_end, len(view) - keep_tail)
        if by_tokens:
            budget = self.setup.window // 2
            tail_start = len(view)
            while tail_start - 1 > head_end and budget - self.count(view[tail_start - 1]) >= 0:
                budget -= self.count(view[tail_start - 1])
                tail_start -= 1
            tail_start = max(head_end, min(tail_start, len(view) - 1))  # keep the newest
        while head_end < tail_start < len(view) and view[tail_start].role == "tool":
            tail_start -= 1
        forgotten = view[head_end:tail_start]
        if not forgotten:
            return None
        instruction = Message(role="user", content=summary_instruction(), origin="host")
        request = SummaryRequest(
            messages=(*(clip_event(m) for m in forgotten), instruction),
            tools=(),
            max_tokens=summary_output_cap(self.setup.window),
        )
        return view[:head_end], view[tail_start:], request

    def request(self) -> PolicyRequest:
        view = self.view()
        too_many = len(view) > self.max_size
        too_big = self.tokens(view) >= self.setup.window - 256
        if not (too_many or too_big):
            return PolicyRequest(messages=tuple(view))
        planned = self.condense(view, by_tokens=too_big and not too_many)
        if planned is None:
            return PolicyRequest(messages=tuple(view))
        head, tail, summary_request = planned
        call, summary = self.summarize(summary_request)
        self.body = [*head, summary, *tail]
        self.covered = len(self.history)
        return PolicyRequest(messages=tuple(self.view()), summaries=(call,), installed=True)


def _factory(context: StrategyContext[PolicyOptions]) -> OpenHandsLikePolicy:
    tuned = constants(context.options, "openhands-like",
                      {"keep_first": KEEP_FIRST, "max_size": MAX_SIZE})
    return OpenHandsLikePolicy(
        context.options, keep_first=int(tuned["keep_first"]), max_size=int(tuned["max_size"]),
    )


@hookimpl
def ctxfold_policies() -> list[StrategySpec]:
    """Register the ``openhands-like`` policy."""
    return [StrategySpec(name="openhands-like", factory=_factory,
                         description="OpenHands LLMSummarizingCondenser: keep_first 4, "
                                     "max_size 120 events, newest half kept")]
