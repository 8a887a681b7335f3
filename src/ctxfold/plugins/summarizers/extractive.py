"""The ``extractive`` summarizer: deterministic, offline, no model (design §4.4, §4.5).

It builds the same seven-heading briefing an LLM would, but only from lines it can find in
the fold region, so it invents nothing: user constraints verbatim, the task statement,
assistant lines that state a decision, file paths, commands with their first output line,
error lines and the last assistant intent. A previous ``<compaction-summary>`` in the region
is merged: its bullets are carried under the same headings, deduplicated. Useful for tests,
offline replays and hosts that cannot afford a summary call. Same input, same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import StrategyContext, StrategySpec
from ctxfold.kernel.summary import (
    SUMMARY_HEADINGS,
    SUMMARY_INSTRUCTION_MARKER,
    is_summary_message,
    unwrap_summary,
)
from ctxfold.kernel.types import Message, SummaryRequest, SummaryResult, Usage
from ctxfold.plugins.summarizers.facts import (
    CODE_LINE,
    CONSTRAINT,
    DECISION,
    ERROR,
    EXIT,
    FIX,
    NOT_FILES,
    PATH,
    argument_strings,
    call_label,
    clip,
    first_line,
    norm_path,
    parse_previous,
    sentences,
    task_statement,
)

FACTS, GOAL, DECISIONS, FILES, COMMANDS, ERRORS, PENDING = SUMMARY_HEADINGS

CHARS_PER_TOKEN = 4
MAX_FILES, MAX_COMMANDS, MAX_ERRORS, MAX_DECISIONS = 80, 60, 30, 30
class _Sections:
    """Ordered, deduplicated bullets per heading."""

    def __init__(self) -> None:
        self.items: dict[str, list[str]] = {h: [] for h in SUMMARY_HEADINGS}
        self._seen: dict[str, set[str]] = {h: set() for h in SUMMARY_HEADINGS}

    def add(self, heading: str, text: str) -> None:
        text = text.strip()
        key = " ".join(text.lower().split())
        if text and key not in self._seen[heading]:
            self._seen[heading].add(key)
            self.items[heading].append(text)

    def extend(self, heading: str, texts: Iterable[str]) -> None:
        for text in texts:
            self.add(heading, text)


def _render(sections: dict[str, list[str]]) -> str:
    blocks = [
        heading + "\n" + "\n".join(f"- {item}" for item in items)
        for heading, items in sections.items()
        if items
    ]
    return "\n\n".join(blocks)


def _bound(sections: dict[str, list[str]], budget: int) -> str:
    """Render within ``budget`` characters, dropping the oldest bullets of the largest section."""
    text = _render(sections)
    while len(text) > budget:
        sizes = {h: sum(len(i) + 3 for i in items) for h, items in sections.items()}
        heading = max((h for h in sections if len(sections[h]) > 1), key=sizes.__getitem__,
                      default=None)
        if heading is None:  # one bullet per section left: cut at a line boundary
            return text[:budget].rsplit("\n", 1)[0] if "\n" in text[:budget] else text[:budget]
        # Standing facts keep their oldest lines (the original constraints); elsewhere the
        # newest entries matter most.
        sections[heading].pop(-1 if heading == FACTS else 0)
        text = _render(sections)
    return text


def _outcome(result: str) -> str:
    outcome = clip(first_line(result), 160) or "(empty result)"
    exit_code = EXIT.search(result)
    return outcome + (f" (exit {exit_code.group(1)})" if exit_code else "")


def _error_lines(text: str) -> Iterator[str]:
    for line in text.splitlines():
        if ERROR.search(line) and not CODE_LINE.match(line):
            yield clip(line, 240)


class _Extractor:
    """One pass over a fold region, filling the sections in message order."""

    def __init__(self) -> None:
        self.out = _Sections()
        self.previous_pending: list[str] = []
        self.task_seen = False
        self.last_assistant: Message | None = None
        self.files: list[str] = []
        self.commands: list[str] = []
        self.errors: list[str] = []
        # call id -> index in self.commands, until its result arrives. Ids are matched to the
        # next result with that id, because some agents reuse call ids.
        self.open_calls: dict[str, int] = {}

    def previous_summary(self, message: Message) -> None:
        for heading, bullets in parse_previous(unwrap_summary(message)).items():
            if heading == GOAL:
                self.task_seen = True  # a later user message is not the task statement
            if heading == PENDING:
                self.previous_pending.extend(bullets)
            else:
                self.out.extend(heading, bullets)

    def user(self, message: Message) -> None:
        if not self.task_seen and message.content.strip():
            self.task_seen = True
            self.out.add(GOAL, clip(first_line(message.content)))
            self.out.add(FACTS, "Task: " + task_statement(message.content))
        for sentence in sentences(message.content):
            if CONSTRAINT.search(sentence):
                self.out.add(FACTS, clip(sentence))

    def assistant(self, message: Message) -> None:
        self.last_assistant = message
        for sentence in sentences(message.content):
            if DECISION.search(sentence):
                self.out.add(DECISIONS, clip(sentence))
            if FIX.search(sentence):
                self.errors.append("Fix: " + clip(sentence))
        for call in message.tool_calls:
            for value in argument_strings(call.arguments):
                self.files.extend(norm_path(p) for p in PATH.findall(value))
            self.open_calls[call.id] = len(self.commands)
            self.commands.append(call_label(call.name, call.arguments))

    def tool(self, message: Message) -> None:
        index = self.open_calls.pop(message.tool_call_id or "", None)
        if index is not None:
            self.commands[index] += " → " + _outcome(message.content)
        # Outputs list many files (ls, grep); only paths with a directory count there.
        self.files.extend(
            norm_path(p) for p in PATH.findall(message.content) if "/" in p
        )
        self.errors.extend(_error_lines(message.content))

    def render(self, max_chars: int) -> str:
        out = self.out
        for index in self.open_calls.values():
            self.commands[index] += " → (no result in the folded region)"
        out.extend(FILES, (f for f in self.files[:MAX_FILES] if f not in NOT_FILES))
        out.extend(COMMANDS, self.commands[-MAX_COMMANDS:])
        out.extend(ERRORS, self.errors)
        out.items[ERRORS] = out.items[ERRORS][-MAX_ERRORS:]
        out.items[DECISIONS] = out.items[DECISIONS][-MAX_DECISIONS:]
        last = self.last_assistant
        if last is not None:
            intent = [p for p in last.content.strip().split("\n\n") if p.strip()]
            if intent:
                out.add(PENDING, clip(intent[-1]))
            for call in last.tool_calls:
                out.add(PENDING, "Last tool call: " + call_label(call.name, call.arguments))
        if not out.items[PENDING]:
            out.extend(PENDING, self.previous_pending)  # nothing newer supersedes it
        return _bound(out.items, max_chars)


def extract_summary(messages: Iterable[Message], max_chars: int) -> str:
    """The extractive briefing of ``messages`` (a fold region) in at most ``max_chars``."""
    extractor = _Extractor()
    for message in messages:
        if message.local_only:
            continue
        if is_summary_message(message):
            extractor.previous_summary(message)
        elif message.role == "user" and message.origin == "user":
            extractor.user(message)
        elif message.role == "assistant":
            extractor.assistant(message)
        elif message.role == "tool":
            extractor.tool(message)
    return extractor.render(max_chars)


class ExtractiveSummarizer:
    """A :class:`ctxfold.kernel.contracts.Summarizer` that needs no model."""

    name = "extractive"

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Summarize the fold region of ``request`` (system and instruction are skipped)."""
        region = [
            m
            for m in request.messages
            if m.role != "system"
            and not (m.role == "user" and m.content.lstrip().startswith(SUMMARY_INSTRUCTION_MARKER))
        ]
        tokens = min(request.target_tokens or request.max_tokens, request.max_tokens)
        text = extract_summary(region, max(tokens, 1) * CHARS_PER_TOKEN)
        # No model was called: the cache ledger bills this summary nothing.
        return SummaryResult(text=text, finish_reason="stop", usage=Usage())


def _factory(_context: StrategyContext) -> ExtractiveSummarizer:
    return ExtractiveSummarizer()


@hookimpl
def ctxfold_summarizers() -> list[StrategySpec]:
    """Register the ``extractive`` summarizer."""
    return [
        StrategySpec(
            name="extractive",
            factory=_factory,
            description="deterministic offline briefing from extracted lines; no model call",
        )
    ]
