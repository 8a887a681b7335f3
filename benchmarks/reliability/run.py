"""Run the reliability harness and print its figures in one summary line.

CI's run (1,000 kills, 10,800 fuzz cases; docs/reliability.md)::

    python -m benchmarks.reliability --kills 1000 --fuzz 1200 --jobs 2 --processes 4 \\
        --turns 40 --rounds 2 --torn 200 --faults 100

A longer run with a seed of its own::

    python -m benchmarks.reliability --kills 3000 --fuzz 3000 --jobs 3 --torn 600 \\
        --faults 400 --rounds 8 --seed 7 --json reliability-long.json

Progress goes to stderr; stdout gets one ``FAIL`` line per problem signature (with up to two
examples), the informational notes and, last, the summary line. The exit code is 1 when any
of lost / torn / dups / crashes / stale_views / double_commits / mutations / secrets /
failures is not 0 (2 for a usage error).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reliability.md"
PARTS = ("kill", "torn", "processes", "fuzz", "faults", "leaks")
FUZZ_TARGETS = ("sidecar", "transcript", "config", "importer", "prefix", "capability", "append",
                "search", "proxy")
STORES = ("fs", "postgres")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.reliability",
        description="ctxfold's reliability harness (docs/reliability.md): kills, torn "
        "writes, N processes on one session, hypothesis fuzzing, provider faults, a secrets "
        "grep.")
    parser.add_argument("--kills", type=int, default=100, help="SIGKILLs (default 100)")
    parser.add_argument("--lives", type=int, default=10,
                        help="kills per session before a new one starts (default 10)")
    parser.add_argument("--max-tool-bytes", type=int, default=2_000_000,
                        help="largest tool result a killed worker appends (default 2 MB)")
    parser.add_argument("--fuzz", type=int, default=2000,
                        help="hypothesis examples per fuzz target (default 2000)")
    parser.add_argument("--targets", default=",".join(FUZZ_TARGETS),
                        help=f"fuzz targets (default {','.join(FUZZ_TARGETS)})")
    parser.add_argument("--case-seconds", type=float, default=10.0,
                        help="the longest one search or proxy fuzz case may take before it "
                        "counts as hung (default 10)")
    parser.add_argument("--torn", type=int, default=200, help="torn-write cases (default 200)")
    parser.add_argument("--processes", type=int, default=3,
                        help="processes on one session (default 3)")
    parser.add_argument("--turns", type=int, default=40, help="turns per process (default 40)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="multi-process rounds per store, each on a new session; every "
                        "second one with stalling reads (default 2)")
    parser.add_argument("--stores", default="fs,postgres",
                        help="stores of the multi-process rounds (default fs,postgres; "
                        "postgres needs $CTXFOLD_TEST_POSTGRES_DSN, else it is skipped with a "
                        "note, or fails with CTXFOLD_REQUIRE_POSTGRES=1)")
    parser.add_argument("--faults", type=int, default=100,
                        help="complete() calls against the faulty emulator (default 100)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="processes sharing the kills: N-1 more run a share each, with a "
                        "seed of their own, while this one runs its share and the other "
                        "parts (default 1)")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"parts to run (default {','.join(PARTS)})")
    parser.add_argument("--seed", type=int, default=0, help="seed of every part (default 0)")
    parser.add_argument("--work", type=Path, default=None,
                        help="work directory (default: a new temporary one, removed after a "
                        "passing run)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--json", type=Path, default=None,
                        help="also write the figures, notes, problems and machine as JSON")
    parser.add_argument("--write-doc", type=Path, nargs="?", const=DOC, default=None,
                        metavar="PATH", help=f"replace the figures section of PATH (default "
                        f"{DOC.relative_to(REPO)}) with this run's")
    parser.add_argument("--commit", default=None,
                        help="the ctxfold commit to name in the record (default: git's HEAD, "
                        "marked when the tree has uncommitted changes)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    for name, allowed in (("parts", PARTS), ("targets", FUZZ_TARGETS),
                          ("stores", STORES)):
        chosen = tuple(x for x in getattr(args, name).split(",") if x)
        unknown = sorted(set(chosen) - set(allowed))
        if unknown:
            parser.error(f"--{name}: unknown {', '.join(unknown)}; choose from "
                         f"{', '.join(allowed)}")
        setattr(args, name, chosen)
    return args


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model or platform.processor(),
            "system": f"{platform.system()} {platform.release()} {platform.machine()}",
            "python": platform.python_version()}


def command(args: argparse.Namespace) -> str:
    """The command that repeats this run (sizes and seed; not where it wrote)."""
    words = ["python -m benchmarks.reliability"]
    for name in ("kills", "lives", "max_tool_bytes", "fuzz", "case_seconds", "torn",
                 "processes", "turns", "rounds", "faults", "jobs", "seed"):
        words.append(f"--{name.replace('_', '-')} {getattr(args, name)}")
    for name, every in (("parts", PARTS), ("targets", FUZZ_TARGETS), ("stores", STORES)):
        if getattr(args, name) != every:
            words.append(f"--{name} {','.join(getattr(args, name))}")
    return " ".join(words)


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                              check=True, timeout=30).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        return head + (" with uncommitted changes" if git("status", "--porcelain",
                                                           "--untracked-files=no") else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_parts(args: argparse.Namespace, work: Path) -> tuple[Any, dict[str, float]]:
    from benchmarks.reliability import (
        faults,
        fuzz_calls,
        fuzz_files,
        fuzz_proxy,
        fuzz_search,
        kill,
        leaks,
        processes,
        torn,
    )
    from benchmarks.reliability.common import Figures

    log = sys.stderr
    total = Figures()
    texts: list[tuple[str, str]] = []
    seconds: dict[str, float] = {}

    def part(name: str, body: Any) -> None:
        started = time.monotonic()
        print(f"== {name}", file=log, flush=True)
        try:
            figures = body()
        except Exception as exc:  # the part itself broke: a failure, and the others still run
            traceback.print_exc(file=log)
            figures = Figures()
            figures.problem("failures", f"part {name} stopped: {type(exc).__name__}",
                            str(exc)[:300])
        seconds[name] = round(time.monotonic() - started, 1)
        total.merge(figures)
        print(f"== {name} done in {seconds[name]} s: {figures.summary_line()}", file=log,
              flush=True)

    shards: list[tuple[Any, Path]] = []
    own = args.kills
    if "kill" in args.parts and args.kills and args.jobs > 1:
        shards, own = start_kill_shards(args, work)
    if "kill" in args.parts and own:
        part("kill", lambda: kill.run(own, work / "kill", seed=args.seed,
                                      lives=args.lives, max_tool_bytes=args.max_tool_bytes,
                                      log=log))
    if "torn" in args.parts and args.torn:
        part("torn", lambda: torn.run(args.torn, work / "torn", seed=args.seed))
    if "processes" in args.parts and args.rounds:
        part("processes", lambda: processes.run(args.processes, args.turns, work / "processes",
                                                rounds=args.rounds, seed=args.seed,
                                                stores=args.stores, log=log))
    if "fuzz" in args.parts and args.fuzz:
        files = tuple(t for t in args.targets if t in fuzz_files.TARGETS)
        calls = tuple(t for t in args.targets if t in fuzz_calls.TARGETS)
        if files:
            part("fuzz files", lambda: fuzz_files.run(args.fuzz, work / "fuzz-files",
                                                      seed=args.seed, targets=files, log=log))
        if calls:
            part("fuzz calls", lambda: fuzz_calls.run(args.fuzz, work / "fuzz-calls",
                                                      seed=args.seed, targets=calls, log=log))
        if "search" in args.targets:
            part("fuzz search", lambda: fuzz_search.run(args.fuzz, work / "fuzz-search",
                                                        seed=args.seed,
                                                        case_seconds=args.case_seconds,
                                                        log=log))
        if "proxy" in args.targets:
            part("fuzz proxy", lambda: fuzz_proxy.run(args.fuzz, work / "fuzz-proxy",
                                                      seed=args.seed,
                                                      case_seconds=args.case_seconds,
                                                      log=log))
    if "faults" in args.parts and args.faults:
        part("faults", lambda: faults.run(args.faults, work / "faults", seed=args.seed,
                                          texts=texts, log=log))
    if shards:
        part("kill shards", lambda: join_kill_shards(shards))
    if "leaks" in args.parts:
        part("leaks", lambda: leaks.scan(work, texts))
    return total, seconds


def start_kill_shards(args: argparse.Namespace, work: Path) -> tuple[list[tuple[Any, Path]],
                                                                     int]:
    """Start ``--jobs - 1`` harness processes that each run a share of the kills (with a
    seed and a work directory of their own); the share left to this process."""
    share = args.kills // args.jobs
    shards = []
    for i in range(1, args.jobs):
        record = work / f"kill-shard-{i}.json"
        command = [sys.executable, "-m", "benchmarks.reliability", "--parts", "kill",
                   "--kills", str(share), "--lives", str(args.lives),
                   "--max-tool-bytes", str(args.max_tool_bytes),
                   "--seed", str(args.seed * 100 + i), "--work", str(work / f"kill-shard-{i}"),
                   "--json", str(record)]
        with open(work / f"kill-shard-{i}.log", "wb") as out:
            shards.append((subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                            cwd=REPO), record))
    return shards, args.kills - share * (args.jobs - 1)


def join_kill_shards(shards: list[tuple[Any, Path]]) -> Any:
    """Wait for the kill shards; their figures, merged."""
    from benchmarks.reliability.common import Figures

    figures = Figures()
    for proc, record in shards:
        proc.wait()
        try:
            figures.merge(Figures.of_record(json.loads(record.read_text())))
        except (OSError, ValueError, KeyError) as exc:
            figures.problem("failures", f"a kill shard left no figures (exit {proc.returncode})",
                            f"{record}: {exc}")
    return figures


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from benchmarks.reliability.common import API_KEY, KEY_ENV

    os.environ[KEY_ENV] = API_KEY  # the faults part's provider and its `chat` child read it
    temporary = args.work is None
    work = Path(tempfile.mkdtemp(prefix="ctxfold-reliability-")) if temporary else args.work
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"reliability: work directory {work}", file=sys.stderr, flush=True)
    total, seconds = run_parts(args, work)
    elapsed = round(time.monotonic() - started, 1)
    for line in total.report():
        print(line)
    print(f"seconds: {elapsed} ({', '.join(f'{k} {v}' for k, v in seconds.items())})")
    print(total.summary_line(), flush=True)
    if args.json or args.write_doc:
        from benchmarks.reliability import report
        from benchmarks.reliability.common import ORDER

        record = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "command": command(args),
            "commit": args.commit or commit(),
            "machine": machine(), "seconds": elapsed, "part_seconds": seconds,
            "figures": {name: getattr(total, name) for name in ORDER},
            "notes": total.notes,
            "problems": {k: {"count": v[0], "examples": v[1]} for k, v in total.problems.items()},
            "summary": total.summary_line(), "passed": not total.bad(),
        }
        if args.json:
            args.json.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        if args.write_doc:
            report.write(record, args.write_doc)
    if temporary and not args.keep and not total.bad():
        shutil.rmtree(work, ignore_errors=True)
    elif temporary:
        print(f"reliability: work directory kept: {work}", file=sys.stderr)
    return 1 if total.bad() else 0
