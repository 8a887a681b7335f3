"""Benchmark a very large tool result: append it, reopen the session, page through it.

Measures, each phase in a fresh child process so its peak resident memory is its own:
* ``append``: ``append_tool_result()`` of one large ``bash`` output (default 100 MB of ASCII
  log lines) — wall time and the process's peak RSS;
* ``reopen``: opening the stored session again (``open_session``) — wall time and RSS;
* ``page``: ``use_capability`` reads of ``session:tool_result`` in 16 KiB pages from the
  reopened session — the first page (which pays the one-off hashing of the body), the median
  of the next pages, and the whole body extrapolated from them.

``--text utf8`` uses mixed Latin/CJK text instead (byte offsets differ from character
offsets). Writes the "## Large tool results" section of docs/performance.md (``--no-write``
to skip). Run: ``python benchmarks/bench_paging.py`` (``--mb 10`` for a quick run).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine_line, write_section

from ctxfold import open_session
from ctxfold.kernel.config import (
    Config,
    EstimatorConfig,
    ProviderConfig,
    StoreConfig,
    SummarizerConfig,
)
from ctxfold.kernel.types import Message, ToolCall

SECTION = "## Large tool results"
SESSION = "bench-paging"
CALL_ID = "call_big"
PAGE = 16384


def config(root: Path) -> Config:
    return Config(
        provider=ProviderConfig(context_window=1_000_000),
        estimator=EstimatorConfig(name="heuristic"),
        summarizer=SummarizerConfig(name="extractive"),
        store=StoreConfig(path=str(root)),
    )


def output(mb: int, text: str) -> str:
    """About ``mb`` MB of tool output: numbered log lines (ASCII, or Latin mixed with CJK).

    Built from 1 MB chunks so that building it costs about twice its size, not a list of
    millions of line objects."""
    line = ("build step {:09d}: compiled module ok, 0 warnings\n" if text == "ascii"
            else "build step {:09d}: 模块编译完成 — ok, 0 warnings\n")
    per_chunk = 1_000_000 // len(line.format(0).encode())
    chunks = ["".join(line.format(c * per_chunk + i) for i in range(per_chunk))
              for c in range(mb)]
    return "".join(chunks)


def rss_mib() -> float:
    """The current resident set size."""
    for row in Path("/proc/self/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1]) / 1024
    return 0.0


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def phase_append(root: Path, mb: int, text: str) -> dict[str, float]:
    body = output(mb, text)
    cm = open_session(SESSION, config=config(root))
    cm.append(Message(role="system", content="You are a build agent."),
              Message(role="user", content="Build everything."),
              Message(role="assistant", content="Building.",
                      tool_calls=(ToolCall(id=CALL_ID, name="bash", arguments="{}"),)))
    before = rss_mib()
    t0 = time.perf_counter()
    cm.append_tool_result(CALL_ID, body, tool_name="bash")
    seconds = time.perf_counter() - t0
    return {"bytes": len(body.encode()), "seconds": seconds, "rss_before_mib": before,
            "rss_mib": peak_rss_mib()}


def phase_read(root: Path, pages: int) -> dict[str, float]:
    t0 = time.perf_counter()
    cm = open_session(SESSION, config=config(root))
    reopen = time.perf_counter() - t0
    reopen_rss = peak_rss_mib()
    ref = json.loads(cm.use_capability({"action": "list"}))  # warm the imports, not the cache
    assert ref["capabilities"]
    times: list[float] = []
    offset, total = 0, 0
    for _ in range(pages + 1):
        arguments = {"tool_call_id": CALL_ID, "offset": offset, "limit": PAGE}
        t0 = time.perf_counter()
        answer = cm.use_capability({"action": "call", "capability_id": "session:tool_result",
                                    "arguments": arguments})
        times.append(time.perf_counter() - t0)
        header = json.loads(answer.split("\n", 1)[0])
        offset, total = header["next_offset"], header["total_bytes"]
        if header["complete"]:
            break
    rest = times[1:] or times
    median = statistics.median(rest)
    count = -(-total // PAGE)
    return {"reopen_seconds": reopen, "reopen_rss_mib": reopen_rss, "first_page_ms":
            times[0] * 1000, "median_page_ms": median * 1000, "pages_measured": len(times),
            "pages_total": count, "read_all_seconds": times[0] + median * (count - 1),
            "read_rss_mib": peak_rss_mib()}


def child(phase: str, root: Path, args: argparse.Namespace) -> dict[str, float]:
    command = [sys.executable, __file__, "--phase", phase, "--root", str(root),
               "--mb", str(args.mb), "--text", args.text, "--pages", str(args.pages)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def cpu_model() -> str:
    """The CPU model named in /proc/cpuinfo (``unknown`` elsewhere)."""
    try:
        for row in Path("/proc/cpuinfo").read_text().splitlines():
            if row.startswith("model name"):
                return row.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


ROWS = (  # (label, key, format) of the table, in order
    ("append {mb} MB: time", "seconds", "{:.2f} s"),
    ("append: peak RSS", "rss_mib", "{:.0f} MiB"),
    ("reopen: time", "reopen_seconds", "{:.2f} s"),
    ("reopen: peak RSS", "reopen_rss_mib", "{:.0f} MiB"),
    ("first page (hashes the body once)", "first_page_ms", "{:.1f} ms"),
    ("each later page (median)", "median_page_ms", "{:.3f} ms"),
    ("all {pages:,.0f} pages (extrapolated)", "read_all_seconds", "{:.2f} s"),
)


def report(text: str, result: dict[str, float], baseline: dict[str, float] | None) -> str:
    mb, pages = result["bytes"] / 1e6, result["pages_total"]
    head = "| measure | this code |" + (" before (baseline) |" if baseline else "")
    rule = "|---|---|" + ("---|" if baseline else "")
    rows = []
    for label, key, fmt in ROWS:
        row = f"| {label.format(mb=round(mb), pages=pages)} | {fmt.format(result[key])} |"
        if baseline:
            row += f" {fmt.format(baseline[key])} |"
        rows.append(row)
    return "\n".join([
        SECTION,
        "",
        machine_line("benchmarks/bench_paging.py") + f" CPU: {cpu_model()} (`nproc` = "
        f"{os.cpu_count()}).",
        "",
        f"One `bash` tool result of {result['bytes']:,.0f} bytes ({text} log lines) appended "
        "with `append_tool_result()`, the session reopened in a new process, then read with "
        f"`use_capability` in {PAGE // 1024} KiB pages ({result['pages_measured']:.0f} pages "
        "measured; the whole body extrapolated from the first page plus the median of the "
        "others). Each phase runs in its own process; RSS is that process's peak, including "
        f"the {result['rss_before_mib']:.0f} MiB it held before the append (the output "
        "itself)." + (" The baseline column is the same script run on the code before the "
                      "paging fix (`--json` there, `--baseline` here)." if baseline else ""),
        "",
        head,
        rule,
        *rows,
        "",
        "A page now costs O(page): the body's bytes, SHA-256 and `result_ref` are computed "
        "once per message and kept while the message lives, and an ASCII body is sliced "
        "without copying. The first page pays the one-off hashing. What remains of the "
        "append and reopen time and memory is the `fs` store's JSON encoding and parsing of "
        f"the {mb:.0f} MB line (`plugins/stores/fs_lines.py`), not the bounding or the paging.",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="size of the tool output in MB")
    parser.add_argument("--text", choices=("ascii", "utf8"), default="ascii")
    parser.add_argument("--pages", type=int, default=200, help="pages to time after the first")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--baseline", type=Path, help="figures (--json) of an earlier run to "
                        "show beside these")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--phase", choices=("append", "read"), help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase == "append":
        print(json.dumps(phase_append(args.root, args.mb, args.text)))
        return 0
    if args.phase == "read":
        print(json.dumps(phase_read(args.root, args.pages)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        result = {**child("append", Path(tmp), args), **child("read", Path(tmp), args)}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")
    baseline = json.loads(args.baseline.read_text(encoding="utf-8")) if args.baseline else None
    text = report(args.text, result, baseline)
    print(text)
    if not args.no_write:
        write_section(SECTION, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
