"""Capabilities ``session:budget`` and ``session:fold``: the model sees its context budget and
asks for a fold at a task boundary.

Unlike the other capabilities these answer from the live session, not from the transcript
alone: the engine hands the dispatcher a :class:`SessionControl` (``ContextManager`` is one),
and nothing here reads the store or calls a summarizer itself.

* ``session:budget`` (no arguments) answers one JSON object of at most a few hundred bytes:
  the window, the input budget (``window − 256``, above which nothing may be sent), the
  trigger (``floor(window × compact_ratio)``), the current prompt estimate, the tokens left
  before the next automatic fold, the checkpoints installed so far, and what helps decide
  whether to fold now: ``fold_min_tokens`` (below it ``session:fold`` refuses), the messages
  the current checkpoint stands for, and the prompt tokens the provider last reported.
* ``session:fold`` ``{"reason": str, "keep": str}`` (both optional, one line each, at most
  :data:`NOTE_MAX` characters) runs the manual fold — the path of ``cm.compact()``, trigger
  ``manual`` — with ``keep`` (and the reason) as the summary's focus, and answers what it
  folded (tokens before and after) or why nothing was. A fold costs a summary request and
  breaks the cached prefix once, so it is refused while the view is under
  :data:`FOLD_MIN_SHARE` of the trigger, and while it has grown by less than
  :data:`FOLD_MIN_GROWTH` of the trigger since the last checkpoint: the model cannot burn
  summaries on a small view, nor re-summarise a summary (the checkpoint itself can be over
  half the trigger when the ratio is low).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from ctxfold.kernel.errors import ToolResultError

BUDGET_ID = "session:budget"
FOLD_ID = "session:fold"
#: A model-requested fold is accepted only from this share of the trigger on: under it the
#: summary request and the cache break cost more than the tokens the fold gives back before
#: the trigger would fold anyway (docs/api.md, "Budget and manual fold").
FOLD_MIN_SHARE = 0.5
#: ... and only once the view has grown by this share of the trigger since the last
#: checkpoint: folding the previous summary again buys nothing.
FOLD_MIN_GROWTH = 0.25
#: Longest ``reason`` / ``keep`` note (characters).
NOTE_MAX = 500
#: Longest ``why`` an answer carries (a receipt's reason, a summarizer's error).
WHY_MAX = 300


@attrs.frozen(kw_only=True)
class Budget:
    """What ``session:budget`` reports (tokens are the engine's admission estimates)."""

    window: int
    input_budget: int
    trigger_tokens: int
    compact_ratio: float
    prompt_tokens: int
    checkpoints: int
    messages: int
    folded_messages: int
    reported_prompt_tokens: int | None = None
    #: Tokens the view grew by since the last checkpoint (``None``: none installed).
    grown: int | None = None

    @property
    def tokens_left(self) -> int:
        """Tokens the view may still grow by before the next automatic fold."""
        return max(0, self.trigger_tokens - self.prompt_tokens)

    @property
    def fold_min_tokens(self) -> int:
        """The smallest view ``session:fold`` folds."""
        return math.ceil(self.trigger_tokens * FOLD_MIN_SHARE)


@attrs.frozen(kw_only=True)
class FoldRequest:
    """A ``session:fold`` call's notes, checked; ``focus`` is what the summary is asked to
    keep (``None``: no focus)."""

    reason: str = ""
    keep: str = ""

    @property
    def focus(self) -> str | None:
        lines = [self.keep] if self.keep else []
        if self.reason:
            lines.append(f"(The agent asked for this fold: {self.reason})")
        return "\n".join(lines) or None


@attrs.frozen(kw_only=True)
class Folded:
    """How a manual fold ended: ``action`` is the ``prepare()`` action (``summary`` when a
    checkpoint was installed), ``why`` the receipt's reason or the error when not."""

    action: str
    tokens_after: int
    checkpoints: int
    folded_messages: int
    why: str = ""


class SessionControl(Protocol):
    """What ``session:budget`` and ``session:fold`` need of the live session."""

    def budget(self) -> Budget:
        """The session's budget now (the next request's view and tools)."""
        ...

    def fold(self, request: FoldRequest) -> Folded:
        """Run the manual fold (``compact()``'s path) with ``request.focus``."""
        ...


def describe_budget() -> dict[str, Any]:
    """``session:budget``'s entry in ``action="list"``."""
    return {
        "id": BUDGET_ID,
        "description": (
            "This session's context budget: JSON {window, input_budget, trigger_tokens "
            "(a fold runs when the prompt reaches it), prompt_tokens, tokens_left, "
            "checkpoints, messages, folded_messages, fold_min_tokens (session:fold refuses "
            "below it), reported_prompt_tokens}."
        ),
        "arguments": {"type": "object", "properties": {}},
    }


def describe_fold() -> dict[str, Any]:
    """``session:fold``'s entry in ``action="list"``."""
    return {
        "id": FOLD_ID,
        "description": (
            "Fold the older context into one summary now, e.g. when a task is done and "
            "another starts; the next request carries it and the folded messages stay "
            "reachable with session:search. Refused while prompt_tokens < fold_min_tokens "
            f"({FOLD_MIN_SHARE:g} × trigger_tokens). keep: what the summary must keep; "
            "reason: why now. Returns JSON {folded, tokens_before, tokens_after, ...}."
        ),
        "arguments": {
            "type": "object",
            "properties": {
                "reason": {"type": "string", "maxLength": NOTE_MAX},
                "keep": {"type": "string", "maxLength": NOTE_MAX},
            },
        },
    }


def _dumps(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def budget_answer(budget: Budget) -> str:
    """The text ``session:budget`` answers."""
    return _dumps({
        "window": budget.window, "input_budget": budget.input_budget,
        "trigger_tokens": budget.trigger_tokens, "compact_ratio": budget.compact_ratio,
        "prompt_tokens": budget.prompt_tokens, "tokens_left": budget.tokens_left,
        "checkpoints": budget.checkpoints, "messages": budget.messages,
        "folded_messages": budget.folded_messages, "fold_min_tokens": budget.fold_min_tokens,
        "reported_prompt_tokens": budget.reported_prompt_tokens,
    })


def call_budget(session: SessionControl, arguments: Mapping[str, Any]) -> str:
    if arguments:
        raise ToolResultError(
            f"{BUDGET_ID} takes no arguments, got {', '.join(sorted(map(str, arguments)))[:200]}"
        )
    return budget_answer(session.budget())


def _note(arguments: Mapping[str, Any], key: str) -> str:
    value = arguments.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ToolResultError(f"argument {key} of {FOLD_ID} must be a string, got "
                              f"{type(value).__name__}")
    value = " ".join(value.split())  # one line: it goes into the summary instruction
    if len(value) > NOTE_MAX:
        raise ToolResultError(f"argument {key} of {FOLD_ID} has {len(value)} characters; at "
                              f"most {NOTE_MAX}")
    return value


def fold_request(arguments: Mapping[str, Any]) -> FoldRequest:
    """A ``session:fold`` call's arguments, checked (a :class:`ToolResultError` names what
    is wrong)."""
    unknown = set(arguments) - {"reason", "keep"}
    if unknown:
        raise ToolResultError(
            f"unknown argument(s) {', '.join(sorted(map(str, unknown)))[:200]} for {FOLD_ID}; "
            "allowed: reason, keep"
        )
    return FoldRequest(reason=_note(arguments, "reason"), keep=_note(arguments, "keep"))


def refusal(budget: Budget) -> str | None:
    """The answer when a fold would not be worth its summary now, else ``None``."""
    growth = math.ceil(budget.trigger_tokens * FOLD_MIN_GROWTH)
    if budget.grown is not None and budget.grown < growth:
        return _dumps({
            "folded": False, "tokens_before": budget.prompt_tokens,
            "trigger_tokens": budget.trigger_tokens,
            "why": (f"the prompt grew by {budget.grown} tokens since the last checkpoint, "
                    f"under {FOLD_MIN_GROWTH:g} × the trigger ({growth}): a fold now would "
                    "mostly summarise that checkpoint again; go on"),
        })
    if budget.prompt_tokens >= budget.fold_min_tokens:
        return None
    return _dumps({
        "folded": False, "tokens_before": budget.prompt_tokens,
        "fold_min_tokens": budget.fold_min_tokens, "trigger_tokens": budget.trigger_tokens,
        "why": (f"the prompt holds {budget.prompt_tokens} tokens, under "
                f"{FOLD_MIN_SHARE:g} × the trigger ({budget.fold_min_tokens}): a summary "
                "now would cost more than it saves; go on, ctxfold folds at the trigger"),
    })


def fold_answer(before: Budget, folded: Folded) -> str:
    """The text ``session:fold`` answers once the fold ran."""
    answer: dict[str, Any] = {"folded": folded.action == "summary",
                              "tokens_before": before.prompt_tokens,
                              "tokens_after": folded.tokens_after,
                              "checkpoints": folded.checkpoints,
                              "folded_messages": folded.folded_messages}
    if folded.action != "summary":
        answer["why"] = (folded.why or f"nothing was folded ({folded.action})")[:WHY_MAX]
    return _dumps(answer)


def check_fold(session: SessionControl,
               arguments: Mapping[str, Any]) -> tuple[FoldRequest, Budget] | str:
    """A ``session:fold`` call checked: the request and the budget before it, or the refusal
    to answer. Only this part judges the model's input; the fold that follows runs outside
    :func:`~ctxfold.capabilities.tool.answering`, so a store's or a hook's error is raised as
    itself, never answered as the model's bad arguments (sync and async alike)."""
    request = fold_request(arguments)
    before = session.budget()
    refused = refusal(before)
    return refused if refused is not None else (request, before)


def call_fold(session: SessionControl,
              arguments: Mapping[str, Any]) -> str | Callable[[], str]:
    """The refusal, or the checked fold to run for the answer (outside the model-input
    error handling: a store's or a hook's error is raised as itself)."""
    checked = check_fold(session, arguments)
    if isinstance(checked, str):
        return checked
    request, before = checked
    return lambda: fold_answer(before, session.fold(request))
