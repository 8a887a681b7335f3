"""Many workers on one session, on the ``fs`` and the ``postgres`` store.

N worker processes × M turns on ONE session: each turn a worker appends a user message,
prepares (the small window makes checkpoints install, with summaries from the in-process
emulator), and appends the assistant's answer. Checked at the end, for each store:

* nothing lost, nothing duplicated: every message every worker appended is stored once;
* order preserved: each worker's messages appear in the order it appended them, each
  user/assistant pair together;
* every install a clean compare-and-swap: the installs the workers saw succeed
  (``ctxfold_after_install``) number exactly the final projection version — two installs
  from the same state would both count but bump the version once;
* no prepare returned a view missing a message committed before it started (and not folded
  into the checkpoint it used).

Reports appends/s and prepare latency (p50/p99) per store, in one run, and writes the
"## Stores: many workers on one session" section of docs/performance.md (``--no-write`` to
skip). The postgres run needs ``CTXFOLD_TEST_POSTGRES_DSN`` (or ``--dsn-env``); without it
only ``fs`` runs, saying so. Exits 1 if any check fails.

Run: ``python benchmarks/bench_stores.py --workers 8 --turns 200``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine_line, write_section

import ctxfold

SECTION = "## Stores: many workers on one session"
SESSION = "shared"


def _config(root: str) -> ctxfold.Config:
    from ctxfold.kernel.config import AgentConfig, EstimatorConfig, ProviderConfig, StoreConfig

    return ctxfold.Config(agent=AgentConfig(compact_ratio=0.5),
                          provider=ProviderConfig(name="emulator", context_window=16_000),
                          estimator=EstimatorConfig(name="heuristic"),
                          store=StoreConfig(path=root))


def _open_store(kind: str, where: str) -> Any:
    if kind == "fs":
        from ctxfold.plugins.stores.fs import FsStore

        return FsStore(Path(where))
    from ctxfold.plugins.stores.postgres import PostgresStore

    return PostgresStore(where)


class _Installs:
    """Counts the installs this worker committed (the ``ctxfold_after_install`` hook)."""

    def __init__(self) -> None:
        self.count = 0

    @ctxfold.hookimpl
    def ctxfold_after_install(self, session_id: str, receipt: Any) -> None:
        self.count += 1


def worker(kind: str, where: str, root: str, name: str, turns: int, queue: Any) -> None:
    store = _open_store(kind, where)
    config = _config(root)
    installs = _Installs()
    registry = ctxfold.Registry.from_config(config, extra_plugins=[installs])
    provider = ctxfold.create_provider(config, registry=registry)
    cm = ctxfold.open_session(SESSION, config=config, registry=registry, store=store,
                              provider=provider, create=False)
    appends: list[float] = []
    prepares: list[float] = []
    missing = 0
    began = time.time()
    for turn in range(turns):
        t0 = time.perf_counter()
        cm.append(ctxfold.Message(role="user", content=f"{name}:{turn}:ask " + "x" * 300))
        appends.append(time.perf_counter() - t0)
        committed = {m.content for m in store.load(SESSION)}
        t0 = time.perf_counter()
        view = cm.prepare().messages
        prepares.append(time.perf_counter() - t0)
        projection = cm.state.projection
        covered = projection.covered_count if projection else 0
        tail = {m.content for m in store.load(SESSION)[covered:]} & committed
        missing += len(tail - {m.content for m in view})
        t0 = time.perf_counter()
        cm.append(ctxfold.Message(role="assistant", content=f"{name}:{turn}:answer"))
        appends.append(time.perf_counter() - t0)
    provider.close()
    queue.put({"name": name, "appends": appends, "prepares": prepares, "missing": missing,
               "installs": installs.count, "began": began, "ended": time.time()})


def run(kind: str, where: str, workers: int, turns: int) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="ctxfold-bench-stores-")
    store = _open_store(kind, where)
    store.create(SESSION)
    store.append(SESSION, [ctxfold.Message(role="system", content="You are a coding agent."),
                           ctxfold.Message(role="user", content="the task")])
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    names = [f"w{i}" for i in range(workers)]
    procs = [context.Process(target=worker, args=(kind, where, root, n, turns, queue))
             for n in names]
    for proc in procs:
        proc.start()
    results: list[dict[str, Any]] = []
    while len(results) < len(procs):
        try:
            results.append(queue.get(timeout=5))
        except Exception:  # queue.Empty: has a worker died?
            if any(p.exitcode not in (None, 0) for p in procs):
                break
    for proc in procs:
        proc.join(60)
    if len(results) < len(procs):
        raise SystemExit(f"{kind}: {len(procs) - len(results)} of {len(procs)} workers failed "
                         "(their tracebacks are above)")
    # From the first worker's first append to the last worker's last (process start-up and
    # imports excluded).
    wall = max(r["ended"] for r in results) - min(r["began"] for r in results)
    messages = store.load(SESSION)[2:]
    contents = [m.content for m in messages]
    problems = []
    if len(contents) != workers * turns * 2:
        problems.append(f"{len(contents)} messages stored, {workers * turns * 2} appended")
    if len(set(contents)) != len(contents):
        problems.append("duplicated messages")
    for n in names:
        mine = [c.split(" ")[0] for c in contents if c.startswith(f"{n}:")]
        wanted = [f"{n}:{t}:{what}" for t in range(turns) for what in ("ask", "answer")]
        if mine != wanted:
            problems.append(f"{n}: order or content changed")
    state = json.loads(store.read_sidecar(SESSION) or b"{}")
    version = (state.get("projection") or {}).get("projection_version", 0)
    installs = sum(r["installs"] for r in results)
    if installs != version:
        problems.append(f"{installs} installs won but the projection version is {version}")
    missing = sum(r["missing"] for r in results)
    if missing:
        problems.append(f"{missing} committed messages missing from prepared views")
    appends = [t for r in results for t in r["appends"]]
    prepares = sorted(t for r in results for t in r["prepares"])
    return {
        "store": kind, "workers": workers, "turns": turns, "messages": len(contents),
        "installs": installs, "wall_s": wall, "appends_per_s": len(appends) / wall,
        "append_p50_ms": statistics.median(appends) * 1e3,
        "prepare_p50_ms": statistics.median(prepares) * 1e3,
        "prepare_p99_ms": prepares[int(0.99 * (len(prepares) - 1))] * 1e3,
        "missing": missing, "problems": problems,
    }


def postgres_where(dsn: str) -> tuple[str, str]:
    """A fresh schema on the server of ``dsn``; (DSN selecting it, schema name)."""
    from urllib.parse import quote

    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    joiner = "&" if "?" in dsn else "?"
    return f"{dsn}{joiner}options={quote(f'-csearch_path={schema}')}", schema


def drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


DESCRIPTION = (
    "N worker processes × {turns} turns each on one session (append, prepare, append; 16K "
    "window, checkpoints summarized by the in-process emulator; the PostgreSQL server on the "
    "same machine, durability off). Checks: nothing lost, duplicated or reordered, every "
    "install a clean compare-and-swap, no view missing a committed message. With more "
    "workers than CPUs the latencies are mostly time spent waiting for a CPU (each postgres "
    "call is a round trip to a server process that must be scheduled too); appends/s is the "
    "throughput of the whole pool.")


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"**{rows[0]['workers']} worker(s)**", "",
             "| store | messages | installs | appends/s | append p50 | prepare p50 | "
             "prepare p99 | checks |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        checks = "all pass" if not r["problems"] else "; ".join(r["problems"])
        lines.append(f"| {r['store']} | {r['messages']} | {r['installs']} | "
                     f"{r['appends_per_s']:.0f} | {r['append_p50_ms']:.1f} ms | "
                     f"{r['prepare_p50_ms']:.1f} ms | {r['prepare_p99_ms']:.1f} ms | {checks} |")
    if len(rows) == 2:
        fs, pg = rows
        lines += ["", f"Same run: postgres appends/s ÷ fs = "
                  f"{pg['appends_per_s'] / fs['appends_per_s']:.2f}; prepare p50 postgres ÷ fs"
                  f" = {pg['prepare_p50_ms'] / fs['prepare_p50_ms']:.2f}."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,8",
                        help="worker counts to run, comma-separated (default 1,8)")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--dsn-env", default="CTXFOLD_TEST_POSTGRES_DSN",
                        help="environment variable holding the PostgreSQL DSN")
    parser.add_argument("--no-write", action="store_true", help="do not update the doc")
    args = parser.parse_args()
    dsn = os.environ.get(args.dsn_env, "")
    note = "" if dsn else f"postgres not run: {args.dsn_env} is not set."
    texts, rows = [], []
    for workers in (int(n) for n in args.workers.split(",")):
        pair = [run("fs", tempfile.mkdtemp(prefix="ctxfold-bench-fs-"), workers, args.turns)]
        if dsn:
            where, schema = postgres_where(dsn)
            try:
                pair.append(run("postgres", where, workers, args.turns))
            finally:
                drop_schema(dsn, schema)
        rows += pair
        texts.append(table(pair))
    text = "\n".join([SECTION, "", machine_line("benchmarks/bench_stores.py"), "",
                      DESCRIPTION.format(turns=args.turns), "", *texts, note]).rstrip() + "\n"
    print(text)
    if not args.no_write:
        write_section(SECTION, text)
    return 1 if any(r["problems"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
