"""What the extractive summarizer recognises in a message: constraints, decisions, fixes,
errors, exit codes, file paths, commands, the task statement; small text helpers."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from ctxfold.kernel.summary import SUMMARY_HEADINGS

FACTS = SUMMARY_HEADINGS[0]

BULLET_MAX = 400  # one bullet never swallows the whole budget

CONSTRAINT = re.compile(
    r"\b(must|mustn't|never|always|don't|do not|dont|only|should|shouldn't|require[sd]?|"
    r"required|need to|needs to|make sure|ensure|avoid|cannot|can't|shall|prefer)\b"
    r"|必须|不要|禁止|务必|不能|只能|应该",
    re.IGNORECASE,
)
DECISION = re.compile(
    r"\b(because|decided|decide|instead|chose|choose|choosing|going with|opted|rationale|"
    r"so that|trade-?off|rather than)\b",
    re.IGNORECASE,
)
FIX = re.compile(r"\b(fix|fixed|fixes|resolved)\b", re.IGNORECASE)
# No leading \b for error/exception so "AssertionError" and "ValueException" count.
ERROR = re.compile(
    r"(?:error|exception)s?\b|\b(?:traceback|failed|failure|fatal|panic)\b", re.IGNORECASE
)
EXIT = re.compile(
    r"\b(?:exit(?:ed)?(?: with)?[ _]?(?:code|status)?|returncode)\W{0,3}(-?\d+)", re.IGNORECASE
)
# Source listings (cat, grep -n) mention errors without any error having happened.
CODE_LINE = re.compile(
    r"\s*(?:\d+[:\-\s]\s*)?(?:raise\b|except\b|class\b|def\b|import\b|from\b|return\b|"
    r"#|//|\*|\)|\"|')"
)
NOT_FILES = frozenset({"/dev/null"})
TAG = re.compile(r"</?[A-Za-z][\w-]*>")
# Bare names need a known extension ("notes.md"), or attribute access ("os.path") would count.
EXT = (
    r"(?:py|pyi|js|jsx|ts|tsx|go|rs|rb|java|kt|cc|cpp|hpp|md|rst|txt|toml|ya?ml|json|jsonl"
    r"|ini|cfg|sh|sql|html|css|lock)"
)
PATH = re.compile(
    r"(?<![\w/.:@~-])("
    r"(?:~|\.{1,2})?/?(?:[\w@+-][\w.@+-]*/)+[\w@+-][\w.@+-]*\.[A-Za-z][\w]{0,9}"  # a/b/c.ext
    r"|(?:~|\.{1,2})?/(?:[\w@+-][\w.@+-]*/)+[\w@+-][\w.@+-]*"  # /abs/dir, ./rel/dir
    rf"|[\w-][\w.-]*\.{EXT}"  # bare file name with a known extension
    r")(?![\w/])"
)
SENTENCE = re.compile(r"(?<=[.!?。！？])\s+")
ARG_KEYS = ("command", "cmd", "path", "file_path", "file", "query", "pattern", "url")


def clip(text: str, limit: int = BULLET_MAX) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def sentences(text: str) -> Iterator[str]:
    for line in text.splitlines():
        for part in SENTENCE.split(line.strip()):
            part = part.strip().lstrip("-*• ").strip()
            if part:
                yield part


def first_line(text: str) -> str:
    """The first line with words in it: bare markup (``<pr_description>``) and exit-status
    lines (reported separately) are skipped."""
    for line in text.splitlines():
        if re.search(r"\w", TAG.sub("", line)) and not EXIT.search(line):
            return line.strip()
    return ""


def norm_path(path: str) -> str:
    return path.removeprefix("./")


def task_statement(text: str) -> str:
    """The first paragraph of the task, cut at a sentence end when it is long."""
    paragraph = text.strip().split("\n\n", 1)[0]
    if len(paragraph) <= BULLET_MAX:
        return clip(paragraph)
    kept = ""
    for sentence in sentences(paragraph):
        if kept and len(kept) + len(sentence) + 1 > BULLET_MAX:
            break
        kept = f"{kept} {sentence}".strip()
    return clip(kept)


def argument_strings(arguments: str) -> list[str]:
    try:
        data = json.loads(arguments) if arguments else {}
    except ValueError:
        return [arguments]
    out: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(data)
    return out


def call_label(name: str, arguments: str) -> str:
    try:
        data = json.loads(arguments) if arguments else {}
    except ValueError:
        data = None
    if isinstance(data, dict):
        for key in ARG_KEYS:
            if isinstance(data.get(key), str) and data[key].strip():
                return f"{name} `{clip(data[key], 200)}`"
    return f"{name}({clip(arguments, 160)})" if arguments else name


def parse_previous(text: str) -> dict[str, list[str]]:
    """Bullets of an earlier briefing by heading; unknown headings count as standing facts."""
    sections: dict[str, list[str]] = {}
    current = FACTS
    by_title = {h.lower(): h for h in SUMMARY_HEADINGS}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            current = by_title.get("## " + stripped.lstrip("#").strip().lower(), FACTS)
        elif stripped:
            sections.setdefault(current, []).append(stripped.lstrip("-*• ").strip())
    return sections
