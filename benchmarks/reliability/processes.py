"""Part ``processes``: N worker processes on ONE session, each appending ``turns`` turns and
calling ``prepare()`` after each — on the ``fs`` store and on PostgreSQL (a fresh schema of
the server ``$CTXFOLD_TEST_POSTGRES_DSN`` names, one per round). Every second round the
workers' stores stall after some transcript reads (``worker.stalling``), which is when
another process's append and install land in between.

Every worker records the monotonic time (system-wide, comparable across processes) at which
each of its appends was acknowledged, and the tags in every view it got (a checkpoint's
summary keeps the tags of what it covers, see ``tag_summary``). Checked afterwards:

* ``stale_views`` — a prepare whose view misses a message some process had acknowledged
  before that prepare started;
* on disk: every acknowledged message once (``lost``/``dups``), each batch contiguous
  (``torn``), each process's messages in its own order;
* ``double_commits`` — two installs that both committed the same generation;
* ``failures`` — a prepare or append that raised (a ``CompactionRequiredError`` from a
  wedged session among them), a worker that dropped or discarded the stored checkpoint
  (nothing in these runs is invalid), and a session that a fresh process cannot prepare
  afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
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
STORES = ("fs", "postgres")
#: The server the postgres rounds use (as the test suite's); each round gets a new schema.
POSTGRES_ENV = "CTXFOLD_TEST_POSTGRES_DSN"
#: What the workers read their round's DSN from (``[store] dsn_env``).
ROUND_DSN_ENV = "CTXFOLD_RELIABILITY_PG_DSN"
#: ``--stall`` of the stalled rounds: half the transcript reads wait up to 0.3 s.
STALL = "0.5,0.3"


def start_workers(work: Path, config: Path, count: int, turns: int, seed: int,
                  stall: str = "", env: dict[str, str] | None = None) -> list[Any]:
    procs = []
    for i in range(1, count + 1):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "benchmarks.reliability.worker", "procs", "--config",
             str(config), "--session", SESSION, "--out", str(work / f"proc-{i}.jsonl"),
             "--proc", str(i), "--turns", str(turns), "--seed", str(seed * 1000 + i),
             "--window", str(WINDOW), *(["--stall", stall] if stall else [])],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=open(work / f"stderr-{i}.txt", "wb"),  # noqa: SIM115
            env={**worker_env(), **(env or {})}))
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


def check_wedged(config: Any, figures: Figures) -> None:
    """A fresh process must still be able to append and prepare (a wedged session raises
    ``CompactionRequiredError`` at every prepare, in every process)."""
    try:
        cm = open_quiet(SESSION, config=config, window=WINDOW, summarize=tag_summary,
                        create=False)
        cm.append({"role": "user", "content": "#p0-1a# after the run"})
        prepared = cm.prepare()
    except ctxfold.CtxfoldError as exc:
        figures.problem("failures", f"the session is wedged after the run: "
                        f"{type(exc).__name__}", str(exc)[:200])
        return
    if prepared.messages[-1].content != "#p0-1a# after the run":
        figures.problem("failures", "the view after the run misses the last message")


def one_round(work: Path, count: int, turns: int, seed: int, figures: Figures,
              store_kind: str = "fs", stall: str = "") -> None:
    store = work / "sessions"
    env: dict[str, str] = {}
    extra = ""
    if store_kind == "postgres":
        env[ROUND_DSN_ENV] = os.environ[ROUND_DSN_ENV]
        extra = f'name = "postgres"\ndsn_env = "{ROUND_DSN_ENV}"\n'
    config_path = write_config(work, store, extra)
    config = load(config_path)
    cm = ctxfold.open_session(SESSION, config=config, window=WINDOW, summarize=tag_summary)
    cm.append({"role": "system", "content": "#p0-0a# You are a test agent."},
              {"role": "user", "content": "#p0-0b# start"})
    acks: list[tuple[int, list[str]]] = [(time.monotonic_ns(), ["p0-0a", "p0-0b"])]
    batches: list[tuple[int, list[str]]] = [(0, ["p0-0a", "p0-0b"])]
    procs = start_workers(work, config_path, count, turns, seed, stall, env)
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
            elif "notice" in record:
                figures.problem("failures", "a process dropped or discarded the stored "
                                "checkpoint", record["notice"])
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
    check_wedged(config, figures)


def postgres_schema(dsn: str) -> tuple[str, str]:
    """A new schema on the server ``dsn`` names: (its name, the DSN that selects it)."""
    import psycopg

    name = f"ctxfold_reliability_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    joiner = "&" if "?" in dsn else "?"
    return name, f"{dsn}{joiner}options=-csearch_path%3D{name}"


def drop_schema(dsn: str, name: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def run(processes: int, turns: int, work: Path, *, rounds: int = 1, seed: int = 0,
        stores: tuple[str, ...] = ("fs",), log: Any = None) -> Figures:
    """``rounds`` rounds on each of ``stores``; every second round with stalling reads."""
    figures = Figures()
    for kind in stores:
        dsn = os.environ.get(POSTGRES_ENV, "") if kind == "postgres" else ""
        if kind == "postgres" and not dsn:
            if os.environ.get("CTXFOLD_REQUIRE_POSTGRES") == "1":
                figures.problem("failures", f"no PostgreSQL server: {POSTGRES_ENV} is not set")
            else:
                figures.note("processes_postgres_skipped_no_server")
            continue
        for r in range(rounds):
            stall = STALL if r % 2 else ""
            schema = ""
            try:
                if dsn:
                    schema, os.environ[ROUND_DSN_ENV] = postgres_schema(dsn)
                one_round(work / f"{kind}-round-{r}", processes, turns, seed * 100 + r,
                          figures, kind, stall)
            finally:
                os.environ.pop(ROUND_DSN_ENV, None)
                if schema:
                    drop_schema(dsn, schema)
            figures.note(f"processes_rounds_{kind}" + ("_stalled" if stall else ""))
            if log:
                print(f"processes: {kind} round {r + 1}/{rounds}"
                      f"{' (stalled reads)' if stall else ''} {figures.summary_line()}",
                      file=log, flush=True)
    return figures
