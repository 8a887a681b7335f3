"""What the built-in replay policies share: history, token counting, summary calls.

A policy (kind ``policy``, contract :class:`~ctxfold.kernel.contracts.Policy`) models one way
of keeping an agent session inside its window. The replay feeds it the session's canonical
messages one by one and, before each recorded assistant message, asks for the request it
would send. Its factory receives :class:`~ctxfold.kernel.kinds.PolicyOptions`.

Every summarizing policy gets the same summarizer and wraps its summary with
:func:`ctxfold.kernel.summary.wrap_summary`, so the comparison measures only *when* and *what*
a policy folds, never the summary text itself. A policy whose original bounds tool outputs
before the model sees them (Codex, opencode) sets :meth:`BasePolicy.cap`; its views are built
from :attr:`BasePolicy.sent`, the history as the original would have kept it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from ctxfold.kernel.errors import MaintenanceError, PluginError, PolicyFailedError
from ctxfold.kernel.kinds import PolicyOptions
from ctxfold.kernel.sessions import SummaryCall
from ctxfold.kernel.summary import (
    LENGTH_RULE,
    build_summary_request,
    validate_summary_result,
    wrap_summary,
)
from ctxfold.kernel.types import Message, RequestShape, SummaryRequest

#: The window peer constants (Codex, opencode) were tuned for: a 200K-token model (Claude
#: Sonnet / GPT-4.1 class). peers.md does not state it; this is the documented assumption of
#: the scaling rule in :func:`scaled`.
REFERENCE_WINDOW = 200_000


def scaled(constant: int, window: int, reference: int = REFERENCE_WINDOW) -> int:
    """A peer's token constant scaled to ``window``: unchanged when ``window >= reference``,
    else ``constant × window / reference`` (so a 40K keep at 200K becomes 12.8K at 64K and
    keeps its share of the window)."""
    if window >= reference:
        return constant
    return max(1, round(constant * window / reference))


def rounds(messages: Sequence[Message], start: int = 0) -> list[tuple[int, int]]:
    """``[start, end)`` index ranges of whole rounds from ``start``: an assistant message with
    the tool results that follow it, or any other single message. Cutting only at round
    boundaries never orphans a tool result."""
    out: list[tuple[int, int]] = []
    i = start
    while i < len(messages):
        j = i + 1
        if messages[i].role == "assistant":
            while j < len(messages) and messages[j].role == "tool":
                j += 1
        out.append((i, j))
        i = j
    return out


class BasePolicy:
    """Shared state: the fed history, token counting and summary calls."""

    name = "base"

    def __init__(self, setup: PolicyOptions) -> None:
        self.setup = setup
        self.history: list[Message] = []
        self.sent: list[Message] = []  # the history as this policy's original keeps it

    def cap(self, message: Message) -> Message:
        """``message`` as the original agent keeps it (its tool-output bound); unchanged by
        default."""
        return message

    def observe(self, message: Message) -> None:
        self.history.append(message)
        self.sent.append(self.cap(message) if message.role == "tool" else message)

    def canonical(self) -> tuple[Message, ...] | None:
        """The fed history, which these policies keep and never edit (only their views)."""
        return tuple(self.history)

    def tokens(self, messages: Sequence[Message]) -> int:
        """Admission estimate of ``messages`` with the session's tools."""
        return self.setup.estimator.estimate(RequestShape(list(messages), self.setup.tools))

    def count(self, message: Message) -> int:
        """Tokens of one message (no request overheads)."""
        est = self.setup.estimator
        return est.estimate(RequestShape([message])) - est.estimate(RequestShape([]))

    def summarize(self, request: SummaryRequest) -> tuple[SummaryCall, Message]:
        """Run the shared summarizer once, asking for the replay's briefing length; the call
        (for costing) and the summary message."""
        request = with_target(request, self.setup)
        result = self.setup.summarizer.summarize(request)
        try:
            text = validate_summary_result(result, session_id=self.setup.session_name)
        except MaintenanceError as exc:
            raise PolicyFailedError(f"policy {self.name}: {exc}") from exc
        return SummaryCall(request=request, text=text), wrap_summary(text)

    def summary_request(self, system: Message | None, region: Sequence[Message]) -> SummaryRequest:
        """A cache-aligned summary request (system + region as sent + instruction, tools
        kept), shrunk from the oldest end until it fits the input budget (``window``: the
        output reservation is already taken off, as for every request)."""
        window = self.setup.window
        limit = window
        region = list(region)
        while True:
            req = build_summary_request(system, region, self.setup.tools, window=window)
            if len(region) <= 1 or self.tokens(req.messages) <= limit:
                return req
            # Like Codex's local path on ContextWindowExceeded: drop the oldest item.
            region = region[1:]


def with_target(request: SummaryRequest, setup: PolicyOptions) -> SummaryRequest:
    """``request`` with the replay's briefing length (``setup.summary_tokens``) when it asks
    for none: a model writes about the length a prompt asks for (ctxfold's ask for
    ``briefing_tokens(window)``), and a default length when the prompt names none. With
    ``setup.equal_summary_length`` every request gets that length, and an instruction's
    ``- Length:`` line says so (what a real summarizer reads)."""
    if not setup.summary_tokens:
        return request
    if setup.equal_summary_length:
        return attrs.evolve(request, target_tokens=setup.summary_tokens,
                            messages=_relength(request.messages, setup.summary_tokens))
    if request.target_tokens:
        return request
    return attrs.evolve(request, target_tokens=setup.summary_tokens)


def _relength(messages: tuple[Message, ...], tokens: int) -> tuple[Message, ...]:
    """``messages`` with the last instruction's ``- Length: about N tokens.`` rule set to
    ``tokens`` (left alone when it has none)."""
    if not messages:
        return messages
    last = messages[-1]
    head, sep, _rest = last.content.partition("\n- Length: about ")
    if not sep:
        return messages
    rest = _rest.split("\n", 1)
    tail = "\n" + rest[1] if len(rest) > 1 else ""
    content = head + "\n" + LENGTH_RULE.format(n=tokens) + tail
    return (*messages[:-1], attrs.evolve(last, content=content))


def first_system(messages: Sequence[Message]) -> Message | None:
    """The leading system message, if any."""
    return messages[0] if messages and messages[0].role == "system" else None


def constants(
    options: PolicyOptions, policy: str, defaults: Mapping[str, float]
) -> dict[str, float]:
    """``defaults`` with the overrides of ``options.constants``; an unknown name is an error."""
    unknown = sorted(set(options.constants) - set(defaults))
    if unknown:
        raise PluginError(
            f"policy {policy!r}: unknown constant(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(defaults)) or '(none)'}"
        )
    return {**defaults, **options.constants}
