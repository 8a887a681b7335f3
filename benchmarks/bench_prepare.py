"""Benchmark prepare() and reopening on long sessions: 5,000, 20,000 and 50,000 messages.

Run from the repository root::

    python -m benchmarks.bench_prepare [--sizes 5000,20000,50000]
        [--estimators heuristic,deepseek] [--turns 200] [--folds 5] [--no-write]

For each estimator and each size, in a fresh process with its own temporary ``fs`` store:

1. **build** a maintained session of that many messages: a system prompt, a task, then tool
   rounds (an assistant call and a realistic code/log result of 200 B–3 KB) appended 100
   messages at a time with a ``prepare()`` after each batch, in a 128,000-token window — so
   the session has been folded many times, as a real one that long has (summaries come from
   a fixed-text ``summarize`` function: no model, no cost);
2. **open + resume**: a new ``ContextManager`` (a new estimator, empty caches) on the stored
   session, then ``resume()`` (the store's vouched prefix stays undecoded);
3. **first prepare after open**: the first ``prepare()`` of that process (with the persisted
   token counts nothing is tokenized again);
4. **per turn**: append one round, then ``prepare()`` — median and p95 of ``--turns`` turns;
5. **fold prepare**: ``compact()`` (a manual checkpoint) after 40 new rounds (more than the
   verbatim tail holds; already counted by a ``prepare()``), the first one after reopening
   and the median of ``--folds``, the summarize function's own time subtracted;
6. **peak RSS** of the process (building included) and the resident memory after reopening.

Writes the "## prepare() overhead" section of ``docs/performance.md`` (``--no-write`` to
print only).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks._report import machine_line, write_section

SECTION = "## prepare() overhead"
WINDOW = 128_000
#: New rounds before each measured fold: more than the 5 % tail holds, so there is a region.
FOLD_ROUNDS = 40
WORDS = (
    "def", "class", "return", "import", "self", "value", "error", "path", "file", "test",
    "assert", "None", "True", "False", "for", "in", "if", "else", "while", "try", "except",
    "raise", "with", "open", "read", "write", "json", "dict", "list", "str", "int",
)


def tool_output(rng: random.Random, i: int) -> str:
    """A realistic tool result: code or log lines of varied length (~200 B to ~3 KB)."""
    lines = []
    for n in range(rng.randint(4, 44)):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        lines.append(f"src/pkg/module_{i % 37}.py:{n + 1}: {words}")
    return "\n".join(lines)


def build_round(rng: random.Random, i: int) -> list[Any]:
    from ctxfold import Message, ToolCall

    args = json.dumps({"command": f"grep -rn {rng.choice(WORDS)} src/pkg/module_{i % 37}.py"})
    return [
        Message(role="assistant", content=f"Checking module {i % 37}.",
                tool_calls=(ToolCall(id=f"call_{i}", name="bash", arguments=args),)),
        Message(role="tool", content=tool_output(rng, i), tool_call_id=f"call_{i}", name="bash"),
    ]


class Summarize:
    """A fixed-text summary function that keeps its own time (subtracted from folds)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, _request: object) -> str:
        t0 = time.perf_counter()
        text = "## Goal\n- Fix the failing tests in src/pkg.\n## Pending & next step\n- go on"
        self.seconds += time.perf_counter() - t0
        return text


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(job: tuple[str, int, int, int]) -> dict[str, Any]:
    """One estimator × size in this (fresh) process."""
    from ctxfold import Config, Message, open_session
    from ctxfold.kernel.config import CheckpointConfig, EstimatorConfig, StoreConfig

    estimator, size, turns, folds = job
    with tempfile.TemporaryDirectory(prefix="ctxfold-bench-") as tmp:
        # Built in seconds with up to 125 checkpoints: no cap on summaries an hour.
        config = Config(estimator=EstimatorConfig(name=estimator), store=StoreConfig(path=tmp),
                        checkpoint=CheckpointConfig(max_summaries_per_hour=0))
        summarize = Summarize()

        def session() -> Any:
            return open_session("bench", config=config, summarize=summarize, window=WINDOW)

        rng = random.Random(7)
        t0 = time.perf_counter()
        cm = session()
        cm.append(Message(role="system", content="You are a coding agent."),
                  Message(role="user", content="Fix the failing tests in src/pkg."))
        i = 0
        while len(cm.canonical) < size:
            batch: list[Any] = []
            while len(batch) < 100 and len(cm.canonical) + len(batch) < size:
                batch.extend(build_round(rng, i))
                i += 1
            cm.append(*batch)
            cm.prepare()
        build_s = time.perf_counter() - t0
        messages, installs = len(cm.canonical), cm.state.projection
        del cm

        t0 = time.perf_counter()
        cm = session()
        cm.resume()
        open_ms = (time.perf_counter() - t0) * 1000
        rss_open = _rss_mib()
        t0 = time.perf_counter()
        first = cm.prepare()
        first_ms = (time.perf_counter() - t0) * 1000
        per_turn = []
        for k in range(turns):
            cm.append(*build_round(rng, 1_000_000 + k))
            t0 = time.perf_counter()
            cm.prepare()
            per_turn.append((time.perf_counter() - t0) * 1000)
        fold_ms = []
        fresh = iter(range(2_000_000, 3_000_000))
        for _k in range(folds):
            action = "summary"
            while action != "none":  # a pressure fold here would leave compact() nothing
                for _j in range(FOLD_ROUNDS):
                    cm.append(*build_round(rng, next(fresh)))
                # counts the new rounds (per-turn work), so the fold is timed alone
                action = cm.prepare().action.value
            before = summarize.seconds
            t0 = time.perf_counter()
            done = cm.compact()
            fold_ms.append((time.perf_counter() - t0 - (summarize.seconds - before)) * 1000)
            assert done.action.value == "summary", done.action
        per_turn.sort()
        return {
            "estimator": estimator, "size": size, "messages": messages,
            "versions": installs.projection_version if installs else 0,
            "view_tokens": first.tokens, "build_s": build_s, "open_resume_ms": open_ms,
            "first_prepare_ms": first_ms, "turn_median_ms": statistics.median(per_turn),
            "turn_p95_ms": per_turn[int(len(per_turn) * 0.95) - 1],
            "fold_median_ms": statistics.median(fold_ms), "fold_first_ms": fold_ms[0],
            "rss_after_open_mib": rss_open,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }


def table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| estimator | messages | checkpoints so far | open + resume | first prepare after open"
        " | per turn, median / p95 | fold prepare: first after open / median | RSS after open"
        " | peak RSS |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['estimator']} | {r['messages']:,} | {r['versions']} | "
            f"{r['open_resume_ms']:.0f} ms | {r['first_prepare_ms']:.0f} ms | "
            f"{r['turn_median_ms']:.2f} / {r['turn_p95_ms']:.2f} ms | "
            f"{r['fold_first_ms']:.0f} / {r['fold_median_ms']:.0f} ms | "
            f"{r['rss_after_open_mib']:.0f} MiB | "
            f"{r['peak_rss_mib']:.0f} MiB |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_prepare",
        description="prepare() and reopening on long maintained sessions (fresh process and "
                    "store per estimator and size).")
    parser.add_argument("--sizes", default="5000,20000,50000",
                        help="comma-separated session lengths in messages (default: %(default)s)")
    parser.add_argument("--estimators", default="heuristic,deepseek",
                        help="comma-separated estimator names (default: %(default)s)")
    parser.add_argument("--turns", type=int, default=200,
                        help="turns measured after reopening (default: %(default)s)")
    parser.add_argument("--folds", type=int, default=5,
                        help="manual checkpoints measured (default: %(default)s)")
    parser.add_argument("--no-write", action="store_true",
                        help="print the table; leave docs/performance.md alone")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    jobs = [(e, s, args.turns, args.folds) for e in args.estimators.split(",") if e
            for s in sizes]
    rows = []
    for job in jobs:  # one fresh process each, one at a time: RSS and timings of its own
        with ProcessPoolExecutor(max_workers=1) as pool:
            row = pool.submit(measure, job).result()
        print(json.dumps(row), file=sys.stderr)
        rows.append(row)
    text = "\n".join([
        SECTION, "", machine_line("python -m benchmarks.bench_prepare"), "",
        f"Sessions built as described in the script's docstring (window {WINDOW:,}; rounds of "
        "an assistant tool call and a 200 B–3 KB code/log result; folded many times while "
        "built). *Open + resume* uses a new ContextManager and a new estimator: the `fs` "
        "store vouches for the checkpoint's covered prefix (the `<id>.prefix` record, "
        "checked by one SHA-256 pass over the file), so only the uncovered tail is decoded; "
        "the *first prepare after open* then reads the token counts persisted with the "
        "session (the `<id>.tokens-<estimator key>` record) instead of tokenizing again. "
        "*Fold prepare* is a manual checkpoint with the summarizer's own time taken out: "
        "planning, the summary request's estimate, the candidate, the covered-prefix hash "
        "(a chain, extended from the vouched or previous hash, not recomputed) and the "
        "compare-and-swap write; the first one after reopening is shown on its own.",
        "", table(rows), "",
    ])
    print(text)
    if not args.no_write:
        write_section(SECTION, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
