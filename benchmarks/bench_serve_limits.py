"""Peak memory of ``ctxfold serve`` sent an oversized request body (issue 29, item 8).

Starts ``ctxfold serve`` (the in-process emulator upstream, nothing configured) as its own
process, reads its peak resident memory (``VmHWM``), then POSTs a 50 MB JSON body three
ways: with a ``Content-Length`` (refused from the headers), chunked with no length (read up
to the limit, then refused), and — to show what the limit saves — once more to a proxy
started with ``--max-body-mib 64``, which reads and parses it whole. Each row is the serve
process's peak RSS after the request and the status it answered.

Writes the "## ctxfold serve request limits" section of docs/performance.md (``--no-write``
to skip). Run: ``python benchmarks/bench_serve_limits.py`` (needs the ``serve`` extra).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine_line, write_section
from bench_serve import memory, start

SECTION = "## ctxfold serve request limits"
MB = 1_000_000


def body(size: int) -> bytes:
    head = b'{"model": "m", "messages": [{"role": "user", "content": "'
    tail = b'"}]}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def chunked(data: bytes, size: int = 1 << 16) -> Iterator[bytes]:
    for at in range(0, len(data), size):
        yield data[at:at + size]


def measure(flags: list[str], data: bytes, *, stream: bool) -> dict[str, float | int]:
    with tempfile.TemporaryDirectory() as root:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXFOLD_")}
        env["CTXFOLD_CONFIG_HOME"] = str(Path(root) / "home")
        process, url = start(["serve", "--port", "0", "--root", root, *flags], env)
        try:
            time.sleep(0.5)
            before = memory(process.pid)["VmHWM"]
            began = time.perf_counter()
            content = chunked(data) if stream else data
            try:
                status = httpx.post(url + "/chat/completions", content=content, timeout=120,
                                    headers={"Content-Type": "application/json"}).status_code
            except httpx.HTTPError:  # the server answered and closed before all was sent
                status = -1
            seconds = time.perf_counter() - began
            after = memory(process.pid)["VmHWM"]
        finally:
            process.terminate()
            process.wait(10)
    return {"status": status, "before": before, "after": after, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=50, help="body size in MB (default 50)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    data = body(args.mb * MB)
    rows = [
        ("default limit (32 MiB), Content-Length sent", [], False),
        ("default limit (32 MiB), chunked, no length", [], True),
        ("--max-body-mib 64 (read and parsed whole)", ["--max-body-mib", "64"], False),
    ]
    lines = [SECTION, "", machine_line("benchmarks/bench_serve_limits.py"), "",
             f"`python benchmarks/bench_serve_limits.py`: one POST of a {args.mb} MB JSON body "
             "to a fresh `ctxfold serve` process (emulator upstream); its peak resident "
             "memory (`VmHWM`) before and after. Past the limit nothing of the body is "
             "parsed (chunked, at most the limit is read); under it the proxy decodes the "
             "JSON, converts the message and counts a window's worth of it before refusing it "
             "as longer than any request could carry (400), which is where the last row's "
             "memory and time go.", "",
             "| request | status | peak RSS before → after | time |", "|---|---|---|---|"]
    for label, flags, stream in rows:
        r = measure(flags, data, stream=stream)
        lines.append(f"| {label} | {r['status']} | {r['before']:.0f} → {r['after']:.0f} MiB "
                     f"| {r['seconds']:.2f} s |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if not args.no_write:
        write_section(SECTION, text)


if __name__ == "__main__":
    main()
