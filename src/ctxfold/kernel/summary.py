"""The summary request and the summary message (design §4.4, §4.5).

A fold replaces a region of the view with one host-written ``user`` message holding a
structured Markdown briefing. The request that produces it is built for provider cache
reuse: the original system message, then the fold region exactly as it was sent before, then
one final host instruction — so everything but the last message is a byte-prefix the
provider has already cached. The request keeps the ordinary tool schemas for the same reason;
the instruction tells the model not to call them.

This module is pure (no I/O, no plugins): the engine builds the request here, hands it to the
selected summarizer, validates the result with :func:`validate_summary_result` and installs
:func:`wrap_summary` of the text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from ctxfold.kernel.errors import MaintenanceError, SummaryFailedError
from ctxfold.kernel.types import Message, SummaryRequest, SummaryResult, ToolSchema

#: The seven headings of the briefing, in order (design §4.5). Empty ones are omitted.
SUMMARY_HEADINGS: tuple[str, ...] = (
    "## Standing facts & constraints",
    "## Goal",
    "## Decisions & rationale",
    "## Files & code",
    "## Commands & outcomes",
    "## Errors & fixes",
    "## Pending & next step",
)

#: First line of every summary instruction. Stable, so a server (the emulator, a proxy) can
#: recognise a summary request from the wire messages alone.
SUMMARY_INSTRUCTION_MARKER = "[ctxfold:summary-request]"

#: The instruction appended as the final user message of a summary request (design §4.4, §4.5).
SUMMARY_INSTRUCTION = f"""{SUMMARY_INSTRUCTION_MARKER}
Context maintenance: the conversation above is about to be replaced by a summary. Write a \
durable resume briefing from which you (or another engineer) can continue the work without \
the original messages.

Use exactly these Markdown headings, in this order, and omit a heading when nothing belongs \
under it:

## Standing facts & constraints
Everything the user stated that still governs the work: requirements, constraints, \
preferences, prohibitions. Quote them verbatim and be exhaustive.
## Goal
What the user ultimately wants done, in one or two bullets.
## Decisions & rationale
Choices made so far and why, including approaches that were rejected.
## Files & code
Files read, created or edited; signatures, line locations, data shapes and the exact edits \
made.
## Commands & outcomes
Commands and tool calls that were run and what came of them (exit codes, counts, results).
## Errors & fixes
Errors met, their causes, and how each was fixed or whether it is still open.
## Pending & next step
Unfinished work, then the single most concrete next action.

Rules:
- Terse bullets; no prose paragraphs.
- Preserve identifiers, file paths, numbers, versions and error messages exactly.
- If the conversation contains an earlier <compaction-summary>, merge its facts that are \
still valid into this briefing and drop those that were superseded.
- Invent nothing: include only what the conversation shows.
- Output only the Markdown briefing, without preamble or closing remarks.
- Do not call any tools."""

FOCUS_PREFIX = "\n\nAdditional focus for this compaction (prioritize keeping this):\n"

SUMMARY_OPEN_TAG = "<compaction-summary>"
SUMMARY_CLOSE_TAG = "</compaction-summary>"
SUMMARY_PREAMBLE = (
    "Summary of earlier conversation (older messages were compacted to save context):"
)

#: Bounds of the summary output cap: min(8192, max(window // 4, 512)) (design §4.4).
SUMMARY_CAP_MAX = 8192
SUMMARY_CAP_MIN = 512


def summary_output_cap(window: int) -> int:
    """``max_tokens`` of a summary request for a context ``window`` (design §4.4).

    A quarter of small windows (so the request itself still fits), never below 512 and never
    above 8192 tokens (origin #9572).
    """
    return min(SUMMARY_CAP_MAX, max(window // 4, SUMMARY_CAP_MIN))


def is_summary_request(messages: Sequence[Message]) -> bool:
    """True when the last message is a ctxfold summary instruction (a user message)."""
    if not messages:
        return False
    last = messages[-1]
    return last.role == "user" and last.content.lstrip().startswith(SUMMARY_INSTRUCTION_MARKER)


#: The briefing length asked for: a 48th of the window, within these bounds (tokens);
#: with the check's facts list (up to twice it) a summary stays under about 9.2K tokens.
BRIEFING_RATIO = 1 / 48
BRIEFING_MIN, BRIEFING_MAX = 512, 3072
LENGTH_RULE = ("- Length: about {n} tokens. Merging an earlier summary never makes the "
               "briefing longer: drop the least useful details first.")
_LENGTH = re.compile(r"^- Length: about (\d{1,7}) tokens\.", re.MULTILINE)


def briefing_tokens(window: int) -> int:
    """The briefing length a summary request asks for (``target_tokens``): the window over
    48, from 512 to 3072 tokens. Asked of the model as a target, never enforced by cutting
    ``max_tokens`` (a truncated briefing is a failure)."""
    return min(BRIEFING_MAX, max(BRIEFING_MIN, int(window * BRIEFING_RATIO)))


def requested_length(instruction: str) -> int:
    """The briefing length a summary instruction asks for (0 when it names none)."""
    found = _LENGTH.search(instruction)
    return int(found.group(1)) if found else 0


def summary_instruction(focus: str | None = None, target: int = 0) -> str:
    """The instruction text, asking for about ``target`` tokens when given, with the optional
    ``/compact <focus>`` text appended."""
    focus = (focus or "").strip()
    text = SUMMARY_INSTRUCTION + ("\n" + LENGTH_RULE.format(n=target) if target else "")
    return text + (FOCUS_PREFIX + focus if focus else "")


def build_summary_request(
    system: Message | None,
    fold_region: Sequence[Message],
    tools: Sequence[ToolSchema],
    *,
    window: int,
    focus: str | None = None,
    target_tokens: int = 0,
) -> SummaryRequest:
    """Build the cache-aligned summary request of design §4.4.

    ``messages`` = ``system`` (when given) + ``fold_region`` as it is (already the
    provider-visible form, so its bytes match what the provider cached) + one final
    ``user``/``host`` instruction, asking for about ``target_tokens`` when given (the engine
    asks for :func:`briefing_tokens`). ``tools`` are passed through unchanged because a
    different tool list would change the cached prefix. ``max_tokens`` is
    :func:`summary_output_cap`.

    ``local_only`` messages are dropped: they are never sent to a provider. A region that
    already starts with a system message gets no second one.
    """
    region = [m for m in fold_region if not m.local_only]
    head: list[Message] = []
    if system is not None and not (region and region[0].role == "system"):
        head.append(system)
    instruction = Message(role="user", content=summary_instruction(focus, target_tokens),
                          origin="host")
    clean_focus = (focus or "").strip() or None
    return SummaryRequest(
        messages=(*head, *region, instruction),
        tools=tuple(tools),
        max_tokens=summary_output_cap(window),
        focus=clean_focus,
        target_tokens=target_tokens,
    )


REVISE_INSTRUCTION = f"""{SUMMARY_INSTRUCTION_MARKER}
Your briefing above lost these facts of the conversation. Write the whole briefing again, \
with the same headings and rules, and keep each of them exactly as written here:
{{facts}}"""


def revise_request(request: SummaryRequest, text: str, lost: Sequence[str]) -> SummaryRequest:
    """The optional second summary pass: ``request`` extended by its answer ``text`` and an
    instruction naming the ``lost`` facts (a byte-extension of the first request, so it
    hits the cache)."""
    facts = "\n".join(f"- {fact}" for fact in lost)
    rule = "\n" + LENGTH_RULE.format(n=request.target_tokens) if request.target_tokens else ""
    return attrs.evolve(request, messages=(
        *request.messages, Message(role="assistant", content=text, origin="host"),
        Message(role="user", content=REVISE_INSTRUCTION.format(facts=facts) + rule,
                origin="host")))


#: First words of the lookup hint closing a summary: which canonical messages it folds.
LOOKUP_MARKER = "[ctxfold:lookup]"
LOOKUP_TOOL_OUTPUTS = 12


def lookup_hint(canonical: Sequence[Message], start: int, end: int) -> str:
    """Where the messages ``canonical[start:end]`` a summary folds can be read again: their
    positions ``#N`` (and ids), the newest folded tool outputs and the capabilities to use.
    Deterministic: the same transcript and range give the same bytes."""
    end = min(end, len(canonical))
    if start >= end:
        return ""
    first, last = canonical[start].id, canonical[end - 1].id
    ids = f" (ids {first}…{last})" if first and last else ""
    tools: list[str] = []  # newest first, one past the cap: O(cap), not O(transcript)
    for i in range(end - 1, start - 1, -1):
        if canonical[i].role == "tool" and canonical[i].tool_call_id:
            tools.append(f"#{i} {canonical[i].tool_call_id}")
            if len(tools) > LOOKUP_TOOL_OUTPUTS:
                break
    more = " and older ones" if len(tools) > LOOKUP_TOOL_OUTPUTS else ""
    shown = ", ".join(tools[:LOOKUP_TOOL_OUTPUTS])
    listed = f" Folded tool outputs, newest first: {shown}{more}." if tools else ""
    return (f"{LOOKUP_MARKER} This summary folds messages #{start}–#{end - 1}{ids} of this "
            f"session; their full text is kept.{listed} Find them with use_capability "
            'capability_id "session:search" {"query": "..."}, read one with "session:message" '
            '{"ref": "#N"}.')


def wrap_summary(text: str, hint: str = "") -> Message:
    """The summary message installed in a projection: ``user``, ``origin="host"``; a
    :func:`lookup_hint` closes the briefing when given."""
    text = f"{text}\n\n{hint}" if hint else text
    content = f"{SUMMARY_OPEN_TAG}\n{SUMMARY_PREAMBLE}\n{text}\n{SUMMARY_CLOSE_TAG}"
    return Message(role="user", content=content, origin="host")


def is_summary_message(message: Message) -> bool:
    """True for a user message whose left-trimmed content starts with ``<compaction-summary>``."""
    return message.role == "user" and message.content.lstrip().startswith(SUMMARY_OPEN_TAG)


def unwrap_summary(message: Message) -> str:
    """The briefing text inside a summary message (inverse of :func:`wrap_summary`).

    Tolerates a missing preamble line or closing tag (summaries written by other tools).
    """
    if not is_summary_message(message):
        raise MaintenanceError(
            f"message {message.id or '(no id)'} (role {message.role}) is not a "
            f"{SUMMARY_OPEN_TAG} message; check is_summary_message() before unwrapping"
        )
    body = message.content.lstrip()[len(SUMMARY_OPEN_TAG) :]
    body = body.removeprefix("\n")
    if body.startswith(SUMMARY_PREAMBLE):
        body = body[len(SUMMARY_PREAMBLE) :].removeprefix("\n")
    stripped = body.rstrip()
    if stripped.endswith(SUMMARY_CLOSE_TAG):
        body = stripped[: -len(SUMMARY_CLOSE_TAG)].removesuffix("\n")
    briefing, marker, _ = body.rpartition("\n\n" + LOOKUP_MARKER)
    return briefing if marker else body


def validate_summary_result(result: SummaryResult, *, session_id: str | None = None) -> str:
    """Return the usable briefing text of ``result`` or raise :class:`SummaryFailedError`.

    Empty (or whitespace-only) text and ``finish_reason == "length"`` are failures: a
    truncated briefing silently loses the newest facts, so nothing is installed
    (design §4.6).
    """
    where = f" for session {session_id!r}" if session_id else ""
    if result.finish_reason == "length":
        raise SummaryFailedError(
            f"summary output was truncated (finish_reason 'length'){where}; nothing was "
            "installed. Use a summarizer model with a larger output limit, or compact a smaller "
            "region (ctxfold compact with focus) so the briefing fits the output cap"
        )
    text = result.text.strip()
    if not text:
        raise SummaryFailedError(
            f"summarizer returned empty output (finish_reason {result.finish_reason!r}){where}; "
            "nothing was installed. Check that the summarizer model answers with text when "
            "reasoning effort is 'none', or select [summarizer] name = \"extractive\""
        )
    return text
