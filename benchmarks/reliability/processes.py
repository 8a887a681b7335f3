"""Part ``processes``: N worker processes on ONE session (one store path), each appending
``turns`` turns and calling ``prepare()`` after each.

Every worker records the monotonic time (system-wide, comparable across processes) at which
each of its appends was acknowledged, and the tags in every view it got (a checkpoint's
summary keeps the tags of what it covers, see ``tag_summary``). Checked afterwards:

* ``stale_views`` — a prepare whose view misses a message some process had acknowledged
  before that prepare started;
* on disk: every acknowledged message once (``lost``/``dups``), each batch contiguous
  (``torn``), each process's messages in its own order;
* ``double_commits`` — two installs that both committed the same generation.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.reliability.common import (
    Figures,
    load,
    open_quiet,
    tag_summary,
    tags_of,
    worker_env,
    write_config,
)

import ctxfold

WINDOW = 12_000
SESSION = "shared"


def start_workers(work: Path, config: Path, count: int, turns: int, seed: int) -> list[Any]:
    procs = []
    for i in range(1, count + 1):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "benchmarks.reliability.worker", "procs", "--config",
             str(config), "--session", SESSION, "--out", str(work / f"proc-{i}.jsonl"),
             "--proc", str(i), "--turns", str(turns), "--seed", str(seed * 1000 + i),
             "--window", str(WINDOW)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=open(work / f"stderr-{i}.txt", "wb"), env=worker_env()))  # noqa: SIM115
    time.sleep(1.0)  # let every worker import ctxfold, so they start together
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.close()
    return procs


def records(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line]
    except FileNotFoundError:
        return []


def check_views(acks: list[tuple[int, list[str]]], preps: list[dict[str, Any]],
                figures: Figures) -> None:
    acks = sorted(acks, key=lambda a: a[0])
    for prep in preps:
        committed = {t for at, tags in acks if at < prep["prep"] for t in tags}
        missing = committed - set(prep["tags"])
        if missing:
            figures.problem("stale_views", "a view misses messages committed before its "
                            "prepare started", f"process {prep['proc']}: {len(missing)} "
                            f"missing, e.g. {sorted(missing)[:3]}")
    figures.views += len(preps)


def check_disk(canonical: list[str], batches: list[tuple[int, list[str]]],
               figures: Figures) -> None:
    position: dict[str, list[int]] = defaultdict(list)
    for i, tag in enumerate(canonical):
        position[tag].append(i)
    acked = [t for _, batch in batches for t in batch]
    lost = [t for t in acked if t not in position]
    if lost:
        figures.problem("lost", "acknowledged message missing on disk", str(lost[:5]),
                        len(lost))
    dups = sum(len(p) - 1 for p in position.values())
    if dups:
        figures.problem("dups", "message twice on disk", "", dups)
    for _proc, batch in batches:
        where = [position[t][0] for t in batch if t in position]
        if where and where != list(range(where[0], where[0] + len(where))):
            figures.problem("torn", "a batch is not contiguous on disk", str(batch))
    by_proc: dict[int, list[int]] = defaultdict(list)
    for proc, batch in batches:
        by_proc[proc].extend(position[t][0] for t in batch if t in position)
    for proc, order in by_proc.items():
        if order != sorted(order):
            figures.problem("failures", "a process's messages are out of order on disk",
                            f"process {proc}")


def check_generations(preps: list[dict[str, Any]], figures: Figures) -> None:
    committed: dict[int, set[str]] = defaultdict(set)
    for prep in preps:
        receipt = prep.get("receipt")
        if prep["action"] in ("prune", "summary") and receipt and receipt[1] == "applied":
            committed[receipt[2]].add(receipt[0])
    figures.note("installs", sum(len(ops) for ops in committed.values()))
    for generation, ops in sorted(committed.items()):
        if len(ops) > 1:
            figures.problem("double_commits", "two installs committed the same generation",
                            f"generation {generation}: {sorted(ops)}", len(ops) - 1)


def one_round(work: Path, count: int, turns: int, seed: int, figures: Figures) -> None:
    store = work / "sessions"
    config_path = write_config(work, store)
    config = load(config_path)
    cm = ctxfold.open_session(SESSION, config=config, window=WINDOW, summarize=tag_summary)
    cm.append({"role": "system", "content": "#p0-0a# You are a test agent."},
              {"role": "user", "content": "#p0-0b# start"})
    acks: list[tuple[int, list[str]]] = [(time.monotonic_ns(), ["p0-0a", "p0-0b"])]
    batches: list[tuple[int, list[str]]] = [(0, ["p0-0a", "p0-0b"])]
    procs = start_workers(work, config_path, count, turns, seed)
    for proc in procs:
        try:
            proc.wait(timeout=900)
        except subprocess.TimeoutExpired:
            proc.kill()
            figures.problem("failures", "a process did not finish within 900 s")
    preps = []
    for i in range(1, count + 1):
        for record in records(work / f"proc-{i}.jsonl"):
            if "ack" in record:
                acks.append((record["t"], record["ack"]))
                batches.append((i, record["ack"]))
            elif "prep" in record:
                preps.append({**record, "proc": i})
            elif "crash" in record:
                figures.problem("crashes", f"processes worker: {record['crash']} at "
                                f"{record['at']}", record["msg"])
            else:
                error = record.get("type") or record.get("fatal")
                figures.problem("failures", f"processes worker got {error} on "
                                f"{record.get('err') or 'open'}", record["msg"])
    check_views(acks, preps, figures)
    try:
        final = open_quiet(SESSION, config=config, window=WINDOW, summarize=tag_summary,
                           create=False)
    except ctxfold.CtxfoldError as exc:
        figures.problem("failures", f"shared session does not open: {type(exc).__name__}",
                        str(exc)[:160])
        return
    check_disk(tags_of(final.canonical), batches, figures)
    check_generations(preps, figures)


def run(processes: int, turns: int, work: Path, *, rounds: int = 1, seed: int = 0,
        log: Any = None) -> Figures:
    figures = Figures()
    for r in range(rounds):
        one_round(work / f"round-{r}", processes, turns, seed * 100 + r, figures)
        if log:
            print(f"processes: round {r + 1}/{rounds} {figures.summary_line()}", file=log,
                  flush=True)
    return figures
