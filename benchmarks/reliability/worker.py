"""The child process of the ``kill`` and ``processes`` parts: a small agent loop on the public
API that records, after every call that returned, what it acknowledged.

``kill`` mode loops forever (until SIGKILLed) over appends of single messages, multi-message
batches (an assistant tool call and its result in ONE ``append()``), big tool results,
``prepare()`` and ``compact()``; before each call it writes ``{"b": op, "tags": [...]}`` and
after it returned ``{"a": op, ...}`` to the acknowledgement file (one ``write`` + ``fsync``
each), or ``{"e": ...}`` when a :class:`ctxfold.CtxfoldError` said nothing happened.

``procs`` mode runs ``--turns`` turns (append, maybe a tool batch, ``prepare()``) and records
the monotonic time of every acknowledged append and the tags of every view it got, and at
the end every notice that says a stored checkpoint was dropped. With ``--stall RATE,SECONDS``
its store waits up to SECONDS after a RATE share of its transcript reads (a process
descheduled on a busy machine, a slow disk, a database far away): the moment another process
commits in between.

Both wait for one line on stdin before opening the session, so the parent can start them
(Python and ctxfold imported) before it needs them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.reliability.common import all_tags, load, open_quiet, tag_summary

import ctxfold

WORDS = ("alpha", "build", "cache", "delta", "error", "fixture", "grep", "hash", "index",
         "json", "kernel", "line", "merge", "node", "offset", "patch", "query", "retry")
#: (operation, weight) of the kill loop.
OPERATIONS = (("single", 22), ("batch", 30), ("multi", 10), ("big", 4), ("split", 4),
              ("prepare", 22), ("compact", 8))


def filler(rng: random.Random, size: int) -> str:
    """About ``size`` characters of log-like text (cheap for megabytes)."""
    line = " ".join(rng.choice(WORDS) for _ in range(12)) + "\n"
    return (line * (size // len(line) + 1))[:size]


def user(tag: str, text: str = "continue") -> dict[str, Any]:
    return {"role": "user", "content": f"#{tag}# {text}"}


def call(tag: str, call_id: str) -> dict[str, Any]:
    arguments = json.dumps({"cmd": f"run {tag}"})
    return {"role": "assistant", "content": f"#{tag}#", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}]}


def result(tag: str, call_id: str, output: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": f"#{tag}# {output}"}


class Acks:
    """The acknowledgement file: one JSON line per record, written and fsynced at once."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def __call__(self, **record: Any) -> None:
        os.write(self.fd, (json.dumps(record) + "\n").encode())
        os.fsync(self.fd)


def batch_for(op: str, rng: random.Random, prefix: str, n: int,
              max_tool: int) -> list[dict[str, Any]]:
    """The messages of one append operation (each tagged ``prefix-n<letter>``)."""
    tag = f"{prefix}-{n}"
    cid = f"call_{prefix}_{n}"
    if op == "single":
        return [user(tag + "a")]
    if op == "batch":
        return [call(tag + "a", cid), result(tag + "b", cid, filler(rng, rng.randint(100, 6000)))]
    if op == "big":
        size = int(2 ** rng.uniform(16, max(16.1, math.log2(max_tool))))  # log-uniform
        return [call(tag + "a", cid), result(tag + "b", cid, filler(rng, size))]
    return [user(tag + letter) if i % 2 == 0 else
            {"role": "assistant", "content": f"#{tag}{letter}# ok"}
            for i, letter in enumerate("abcde"[: rng.randint(3, 5)])]


def kill_loop(args: argparse.Namespace, cm: Any, ack: Acks) -> None:
    rng = random.Random(args.seed)
    prefix = f"k{args.life}"
    names = [op for op, _ in OPERATIONS]
    weights = [w for _, w in OPERATIONS]
    if not cm.canonical:
        first = [{"role": "system", "content": f"#{prefix}-0a# You are a test agent."},
                 user(f"{prefix}-0b", "start")]
        ack(b="append", kind="first", tags=[f"{prefix}-0a", f"{prefix}-0b"])
        cm.append(*first)
        ack(a="append", tags=[f"{prefix}-0a", f"{prefix}-0b"])
    for n in range(1, args.max_ops + 1):
        op = rng.choices(names, weights)[0]
        try:
            if op in ("prepare", "compact"):
                ack(b=op)
                prepared = cm.prepare() if op == "prepare" else cm.compact()
                ack(a=op, action=str(prepared.action), gen=cm.state.generation,
                    pv=prepared.projection_version)
            elif op == "split":  # a call and its result in two appends: not one batch
                tag, cid = f"{prefix}-{n}", f"call_{prefix}_{n}"
                ack(b="append", kind=op, tags=[tag + "a"])
                cm.append(call(tag + "a", cid))
                ack(a="append", tags=[tag + "a"])
                ack(b="append", kind=op, tags=[tag + "b"])
                cm.append_tool_result(cid, f"#{tag}b# " + filler(rng, 500), tool_name="bash")
                ack(a="append", tags=[tag + "b"])
            else:
                batch = batch_for(op, rng, prefix, n, args.max_tool_bytes)
                tags = [m["content"][1:].split("#", 1)[0] for m in batch]
                ack(b="append", kind=op, tags=tags)
                cm.append(*batch)
                ack(a="append", tags=tags)
        except ctxfold.CtxfoldError as exc:
            ack(e=op, type=type(exc).__name__, msg=str(exc)[:300])


def stalling(config: Any, stall: str, seed: int) -> Any:
    """The store ``config`` selects, its transcript reads stalling as ``--stall`` says."""
    rate, seconds = (float(x) for x in stall.split(","))
    rng = random.Random(seed)
    store = ctxfold.Registry.from_config(config.config).create(
        "store", config.config.store.name, config=config.config)

    def stalled(read: Any) -> Any:
        def run(*a: Any, **kw: Any) -> Any:
            loaded = read(*a, **kw)
            if rng.random() < rate:
                time.sleep(rng.uniform(0, seconds))
            return loaded
        return run

    for name in ("load", "load_transcript"):
        if hasattr(store, name):
            setattr(store, name, stalled(getattr(store, name)))
    return store


def procs_loop(args: argparse.Namespace, cm: Any, out: Acks) -> None:
    rng = random.Random(args.seed)
    prefix = f"p{args.proc}"
    for t in range(args.turns):
        appends = [[user(f"{prefix}-{t}a", f"turn {t} of process {args.proc}")]]
        if rng.random() < 0.7:
            cid = f"call_{prefix}_{t}"
            appends.append([call(f"{prefix}-{t}b", cid),
                            result(f"{prefix}-{t}c", cid, filler(rng, rng.randint(200, 2500)))])
        for batch in appends:
            try:
                cm.append(*batch)
            except ctxfold.CtxfoldError as exc:
                out(err="append", type=type(exc).__name__, msg=str(exc)[:300])
                continue
            out(ack=[m["content"][1:].split("#", 1)[0] for m in batch], t=time.monotonic_ns())
        start = time.monotonic_ns()
        try:
            prepared = cm.prepare()
        except ctxfold.CtxfoldError as exc:
            out(err="prepare", type=type(exc).__name__, msg=str(exc)[:300])
            continue
        receipt = cm.state.last_receipt
        out(prep=start, end=time.monotonic_ns(), tags=sorted(all_tags(prepared.messages)),
            action=str(prepared.action), gen=cm.state.generation,
            pv=prepared.projection_version,
            receipt=None if receipt is None else
            [receipt.operation_id, str(receipt.status), receipt.generation])
    for notice in cm.notices:
        if "dropped" in notice or "discarded" in notice:  # nothing here is invalid
            out(notice=notice[:300])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["kill", "procs"])
    parser.add_argument("--config", required=True, help="config file (store path inside)")
    parser.add_argument("--session", required=True)
    parser.add_argument("--out", required=True, help="acknowledgement / record file")
    parser.add_argument("--window", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--life", type=int, default=0, help="kill mode: tag prefix number")
    parser.add_argument("--max-ops", type=int, default=10**9)
    parser.add_argument("--max-tool-bytes", type=int, default=2_000_000)
    parser.add_argument("--proc", type=int, default=0, help="procs mode: process number")
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--stall", default="", metavar="RATE,SECONDS",
                        help="procs mode: stall this share of transcript reads (see above)")
    args = parser.parse_args(argv)
    config = load(Path(args.config))
    out = Acks(args.out)
    sys.stdin.readline()  # "go"
    try:
        store = stalling(config, args.stall, args.seed) if args.stall else None
        cm = open_quiet(args.session, config=config, window=args.window,
                        summarize=tag_summary, store=store)
        (kill_loop if args.mode == "kill" else procs_loop)(args, cm, out)
    except ctxfold.CtxfoldError as exc:
        out(fatal=type(exc).__name__, msg=str(exc)[:300])
        return 4
    except Exception as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        out(crash=type(exc).__name__, msg=str(exc)[:300],
            at=f"{Path(frame.filename).name}:{frame.lineno}")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
