"""Capability ``session:search``: find messages in this session's whole canonical history.

Every message of the current session is searched — folded ones and the full output of
bounded tool results included — through its document (see
:mod:`ctxfold.capabilities.session_message`), newest first. Matching is case-insensitive:

* ``terms`` (default): the query split on whitespace; a message matches when it holds
  every term as a substring;
* ``regex=true``: the query is an RE2 pattern (Python ``re`` syntax without look-arounds
  and back-references), matched by Google's RE2 engine, whose time is linear in the text
  for any pattern and which releases the GIL while it matches. A pattern that compiles to
  more than :data:`PROGRAM_MAX` instructions is refused; the text is matched in *windows*
  (runs of whole lines, a longer line cut) of at most ``WINDOW_WORK // program size``
  bytes, so one window costs at most tens of milliseconds whatever the pattern, and a match
  never crosses a window edge. A call stops scanning after :data:`SEARCH_SECONDS` (checked
  before every window) and says where to resume (a message it could not finish is listed
  in ``partial`` and skipped).

The answer is one JSON object ``{"hits": [...], "complete", "next"}`` (and ``partial``); a hit
is ``{"ref": "#N", "id", "role", ("tool_call_id", "result_ref"), "total_bytes", "matches":
[{"at": byte offset, "excerpt"}]}``. At most ``limit`` hits and :data:`OUTPUT_BUDGET`
bytes come back, and at most :data:`SCAN_BUDGET` characters are scanned per call; ``next``
is the arguments to add for the next page (``{"before": "#K", "offset": 0}``) or ``null``
once the oldest message was reached. ``offset`` skips that many matching messages.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from itertools import islice
from typing import Any, NamedTuple

from ctxfold.capabilities.arguments import int_arg
from ctxfold.capabilities.bounding import TOOL_CONTENT_BOUND
from ctxfold.capabilities.session_message import Document, document, ref_of, resolve
from ctxfold.kernel.errors import ToolResultError
from ctxfold.kernel.types import Message

CAPABILITY_ID = "session:search"
QUERY_MAX = 256
TERMS_MAX = 16
LIMIT_DEFAULT = 10
LIMIT_MAX = 50
MATCHES_PER_HIT = 3
EXCERPT_BEFORE = 60
EXCERPT_AFTER = 140
#: The answer stays well inside one bounded tool result.
OUTPUT_BUDGET = TOOL_CONTENT_BOUND - 2048
#: Characters scanned per call at most; past it the answer says where to resume.
SCAN_BUDGET = 64 * 1024 * 1024
#: Largest compiled pattern (RE2 instructions): its matching cost per byte is bounded.
PROGRAM_MAX = 2000
#: Window bytes × program size per window: at RE2's slowest (measured about 50 ns per
#: instruction and byte, when its DFA gives up for the NFA) one window takes ≤ 0.1 s.
WINDOW_WORK = 2_000_000
WINDOW_MIN = 1024
#: A call's deadline: no window starts after it (docs/api.md).
SEARCH_SECONDS = 2.0
ROLES = ("system", "user", "assistant", "tool")
_ALLOWED = {"query", "regex", "role", "before", "offset", "limit"}


def describe() -> dict[str, Any]:
    """This capability's entry in ``action="list"``."""
    return {
        "id": CAPABILITY_ID,
        "description": (
            "Search this session's whole history (folded messages and full tool outputs "
            "included), newest first, case-insensitively: by terms (all must occur) or, with "
            "regex=true, by an RE2 regular expression (Python syntax without look-arounds or "
            "back-references). Returns JSON {hits: [{ref, id, role, "
            "tool_call_id, result_ref, total_bytes, matches: [{at, excerpt}]}], complete, "
            "next}. Read a hit with session:message {ref, offset: at}; pass next's "
            "arguments for more hits."
        ),
        "arguments": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "maxLength": QUERY_MAX},
                "regex": {"type": "boolean", "default": False},
                "role": {"type": "string", "enum": list(ROLES)},
                "before": {"type": "string", "description": "search messages older than "
                                                            "this ref (\"#N\" or an id)"},
                "offset": {"type": "integer", "minimum": 0, "default": 0},
                "limit": {"type": "integer", "minimum": 1, "maximum": LIMIT_MAX,
                          "default": LIMIT_DEFAULT},
            },
            "required": ["query"],
        },
    }


class Regex(NamedTuple):
    """A compiled ``session:search`` pattern and the window it is matched in (bytes)."""

    pattern: Any  # re2._Regexp, matched over UTF-8 bytes
    window: int


def compile_regex(query: str) -> Regex:
    """The pattern compiled by RE2 (case-insensitive), or a :class:`ToolResultError`."""
    import re2  # the google-re2 binding (docs/dependencies.md)

    options = re2.Options()
    options.case_sensitive = False
    options.log_errors = False  # RE2 would print to stderr; the error is the answer
    try:
        pattern = re2.compile(query, options)
    except re2.error as exc:
        detail = str(exc).removeprefix("b'").removesuffix("'")[:160]
        hint = "; look-arounds and back-references are not supported" if "(?" in query \
            or "\\" in query else ""
        raise ToolResultError(f"invalid regex {query[:80]!r}: {detail}{hint}") from None
    size = pattern.programsize
    if size > PROGRAM_MAX:
        raise ToolResultError(f"the pattern compiles to {size} instructions (at most "
                              f"{PROGRAM_MAX}); use smaller repetition counts or search by "
                              "terms")
    return Regex(pattern, max(WINDOW_MIN, WINDOW_WORK // max(size, 1)))


def _windows(data: bytes, width: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each window of ``data``: whole lines up to ``width`` bytes, a
    longer line cut on a UTF-8 character boundary."""
    start, size = 0, len(data)
    while start < size:
        end = min(start + width, size)
        if end < size:
            newline = data.rfind(b"\n", start, end)
            if newline >= 0:
                end = newline + 1
            else:
                while end > start + 1 and data[end] & 0xC0 == 0x80:
                    end -= 1
        yield start, end
        start = end


def _regex_matches(regex: Regex, data: bytes, deadline: float) -> list[int] | None:
    """UTF-8 byte offsets of the first matches; ``None`` when the time ran out first."""
    found: list[int] = []
    for start, end in _windows(data, regex.window):
        if time.monotonic() > deadline:
            return None
        rest = MATCHES_PER_HIT - len(found)
        found += [m.start() for m in islice(regex.pattern.finditer(data, start, end), rest)]
        if len(found) >= MATCHES_PER_HIT:
            break
    return found


def _term_matches(terms: Sequence[re.Pattern[str]], text: str) -> list[int]:
    found = []
    for term in terms:
        match = term.search(text)
        if match is None:
            return []
        found.append(match.start())
    return sorted(found)[:MATCHES_PER_HIT]


def _hit(index: int, message: Message, doc: Document, positions: list[int]) -> dict[str, Any]:
    hit: dict[str, Any] = {"ref": ref_of(index), "id": message.id, "role": message.role}
    if message.role == "tool":
        hit.update(tool_call_id=message.tool_call_id, result_ref=doc.result_ref)
    text = doc.text
    hit["total_bytes"] = doc.total
    hit["matches"] = [
        {"at": pos if doc.data is None else len(text[:pos].encode()),
         "excerpt": text[max(0, pos - EXCERPT_BEFORE) : pos + EXCERPT_AFTER]}
        for pos in positions
    ]
    return hit


def _arguments(messages: Sequence[Message], arguments: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(arguments) - _ALLOWED
    if unknown:
        raise ToolResultError(
            f"unknown argument(s) {', '.join(sorted(map(str, unknown)))[:200]} for "
            f"{CAPABILITY_ID}; allowed: {', '.join(sorted(_ALLOWED))} (only this session's "
            "history can be searched)"
        )
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolResultError(f"{CAPABILITY_ID} needs arguments.query (a non-empty string)")
    if len(query) > QUERY_MAX:
        raise ToolResultError(f"query is {len(query)} characters; at most {QUERY_MAX}")
    regex = arguments.get("regex", False)
    if not isinstance(regex, bool):
        raise ToolResultError(f"argument regex={regex!r:.40} must be true or false")
    role = arguments.get("role")
    if role is not None and role not in ROLES:
        raise ToolResultError(f"argument role={role!r:.40} must be one of {', '.join(ROLES)}")
    before = arguments.get("before")
    end = len(messages) if before is None else resolve(messages, before, "before")
    offset = int_arg(arguments, "offset", 0)
    limit = int_arg(arguments, "limit", LIMIT_DEFAULT)
    if offset is None or offset < 0:
        raise ToolResultError(f"offset={offset} must be 0 or more (matching messages to skip)")
    if limit is None or not 1 <= limit <= LIMIT_MAX:
        raise ToolResultError(f"limit={limit} is out of range; use 1..{LIMIT_MAX} hits")
    return {"query": query, "regex": regex, "role": role, "end": end, "offset": offset,
            "limit": limit}


def search(messages: Sequence[Message], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The answer of one ``session:search`` call (see the module docstring)."""
    args = _arguments(messages, arguments)
    query: str = args["query"]
    if args["regex"]:
        regex = compile_regex(query)

        def matches(doc: Document) -> list[int] | None:
            data = doc.text.encode() if doc.data is None else doc.data
            found = _regex_matches(regex, data, deadline)
            if found is None or doc.data is None:
                return found
            return [len(data[:at].decode()) for at in found]  # character offsets
    else:
        words = list(dict.fromkeys(query.lower().split()))
        if len(words) > TERMS_MAX:
            raise ToolResultError(f"the query has {len(words)} terms; at most {TERMS_MAX}")
        terms = [re.compile(re.escape(word), re.IGNORECASE) for word in words]

        def matches(doc: Document) -> list[int] | None:
            return _term_matches(terms, doc.text)

    hits: list[dict[str, Any]] = []
    partial: list[str] = []
    skip, scanned, used = args["offset"], 0, 0
    deadline = time.monotonic() + SEARCH_SECONDS
    stop: int | None = None  # the position to resume before, when the answer is cut
    for index in range(args["end"] - 1, -1, -1):
        message = messages[index]
        if args["role"] is not None and message.role != args["role"]:
            continue
        doc = document(message)
        if scanned and (scanned + len(doc.text) > SCAN_BUDGET or time.monotonic() > deadline):
            stop = index + 1
            break
        positions = matches(doc)
        if positions is None:  # out of time inside this message
            if scanned:  # resume with this message
                stop = index + 1
                break
            partial.append(ref_of(index))  # alone too slow: skipped, so the search moves on
            stop = index if index > 0 else None
            break
        scanned += len(doc.text) or 1
        if not positions:
            continue
        if skip:
            skip -= 1
            continue
        hit = _hit(index, message, doc, positions)
        size = len(json.dumps(hit, ensure_ascii=False).encode()) + 2
        if hits and used + size > OUTPUT_BUDGET:
            stop = index + 1
            break
        if size > OUTPUT_BUDGET:
            hit["matches"] = [{"at": m["at"], "excerpt": ""} for m in hit["matches"]]
        hits.append(hit)
        used += size
        if len(hits) == args["limit"]:
            stop = index if index > 0 else None
            break
    next_args = None if stop is None else {"before": ref_of(stop), "offset": skip}
    answer = {"hits": hits, "complete": stop is None, "next": next_args}
    return {**answer, "partial": partial} if partial else answer


def call(messages: Sequence[Message], arguments: Mapping[str, Any]) -> str:
    answer = search(messages, arguments)
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":"))
