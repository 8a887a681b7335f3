"""What a hostile ``session:search`` regex costs (issue 29, item 1).

For each pattern of the hostile list (``tests/capabilities/test_session_search.py``) and
three 400 KB texts (one letter repeated, a random two-letter text, ordinary words), the
pattern is compiled as ``session:search`` compiles it and matched over the text window by
window, as a call does; reported: its RE2 program size, its window, the slowest window, the
whole text's time (CPU time: wall time on a shared machine is noise), and the answer of
one real call (a 200 KB tool result ×20): what it says
and how long it took. The deadline promises no window after ``SEARCH_SECONDS``, and a
window costs at most ``WINDOW_WORK`` instruction×bytes.

Writes the "## session:search regex deadline" section of docs/performance.md (``--no-write``
to skip). Run: ``python benchmarks/bench_search_regex.py``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine_line, write_section

from ctxfold.capabilities import session_search
from ctxfold.capabilities.tool import handle_use_capability
from ctxfold.kernel.errors import ToolResultError
from ctxfold.kernel.types import Message

SECTION = "## session:search regex deadline"
PATTERNS = ["a{0,2000}a{0,2000}b", "a{0,1000}a{0,1000}b", "(a+)+b", "(a|aa)+b",
            r"(\w+\s?)*$", "(.*a){40}", r"^(a?){25}a{25}$", "(.*)*x", r"(a)\1+b",
            "a.*b.*c.*d.*e.*f", "[ab]*a[ab]{60}c", "(?:a{1,10}){1,90}c", ".*a.{200}q"]


def texts(size: int) -> dict[str, bytes]:
    rng = random.Random(7)
    words = b"lorem ipsum dolor sit amet 123 foo=bar\n"
    return {"a…": b"a" * size, "ab random": bytes(rng.choice(b"ab") for _ in range(size)),
            "words": (words * (size // len(words) + 1))[:size]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    bodies = texts(400_000)
    rows = []
    for pattern in PATTERNS:
        try:
            regex = session_search.compile_regex(pattern)
        except ToolResultError as exc:
            rows.append(f"| `{pattern}` | refused: {str(exc)[:70]} | | | |")
            print(rows[-1], flush=True)
            continue
        worst, total = 0.0, 0.0
        for data in bodies.values():
            began = time.process_time()
            for start, end in session_search._windows(data, regex.window):
                t = time.process_time()
                list(regex.pattern.finditer(data, start, end))
                worst = max(worst, time.process_time() - t)
            total = max(total, time.process_time() - began)
        messages = [Message(role="tool", tool_call_id=f"c{i}", content="a" * 200_000)
                    for i in range(20)]
        began = time.process_time()
        answer = handle_use_capability(messages, {
            "action": "call", "capability_id": "session:search",
            "arguments": {"query": pattern, "regex": True}})
        took = time.process_time() - began
        said = "error" if answer.startswith("error") else (
            "partial" if "partial" in json.loads(answer)
            else "complete" if json.loads(answer)["complete"] else "cut (next)")
        rows.append(f"| `{pattern}` | {regex.pattern.programsize} / {regex.window} B | "
                    f"{worst * 1000:.1f} ms | {total:.2f} s | {said}, {took:.2f} s |")
        print(rows[-1], flush=True)
    lines = [SECTION, "", machine_line("benchmarks/bench_search_regex.py"), "",
             "`python benchmarks/bench_search_regex.py`: each hostile pattern compiled as "
             "`session:search` compiles it (RE2, case-insensitive), matched window by window "
             "over three 400 KB texts (`a` repeated, random `a`/`b`, ordinary words); the "
             "slowest window and the slowest whole text of the three; then one real call over "
             f"20 tool results of 200 KB of `a` (deadline {session_search.SEARCH_SECONDS:g} s, "
             f"window work {session_search.WINDOW_WORK:,} instruction×bytes). Times are CPU "
             "time of this process (the machine is shared: wall time varies with its load).",
             "",
             "| pattern | program / window | slowest window | slowest 400 KB | one call |",
             "|---|---|---|---|---|", *rows]
    if not args.no_write:
        write_section(SECTION, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
