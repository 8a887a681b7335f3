"""Fuzz target ``prefix``: a long session reopened through the ``fs`` store's vouched prefix
(``<id>.prefix``) with its transcript lines or its prefix records damaged.

The lazy open must agree with a plain parse of the same bytes: it either raises a
:class:`ctxfold.CtxfoldError`, or gives the same transcript, and it never keeps a checkpoint
that the plain parse drops (a record vouching for changed bytes would let a stale checkpoint
stand).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from benchmarks.reliability.common import Figures, open_quiet, short, tag_summary
from benchmarks.reliability.fuzz_values import VALUES, dumps
from benchmarks.reliability.worker import call, result, user
from hypothesis import strategies as st

import ctxfold

WINDOW = 20_000
RECORD = 52


class PrefixBench:
    """Session ``p`` of 80 tool rounds with one checkpoint (covering most of it) and its
    vouched prefix, in a store of its own; ``plain`` holds the same bytes without it."""

    def __init__(self, work: Path) -> None:
        self.store, self.plain = work / "prefix-sessions", work / "prefix-plain"
        cm = self.open(self.store, create=True)
        cm.append({"role": "system", "content": "You are a test agent."}, user("p0", "start"))
        for n in range(80):
            cm.append(call(f"p{n}a", f"c{n}"), result(f"p{n}b", f"c{n}", f"out {n} " * 30))
        cm.compact()
        self.files = {p.name: p.read_bytes() for p in self.store.iterdir()
                      if p.name.startswith("p.") and not p.name.endswith(".lock")}
        assert "p.prefix" in self.files, "the checkpoint was not vouched for"

    def open(self, store: Path, create: bool = False) -> Any:
        return open_quiet("p", store_path=str(store), window=WINDOW, summarize=tag_summary,
                          create=create)

    def reset(self, transcript: bytes, prefix: bytes) -> None:
        for root in (self.store, self.plain):
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            for name, data in self.files.items():
                if name.endswith((".jsonl", ".context.json")):
                    (root / name).write_bytes(transcript if name.endswith(".jsonl") else data)
        (self.store / "p.prefix").write_bytes(prefix)


def prefix_target(bench: PrefixBench) -> tuple[Any, Any]:
    lines = bench.files["p.jsonl"].split(b"\n")[:-1]
    records = bench.files["p.prefix"]
    line = st.one_of(VALUES.map(lambda v: dumps(v).encode()), st.binary(max_size=40),
                     st.just(b""), st.builds(lambda i: lines[i], st.integers(0, len(lines) - 1)))
    prefix = st.one_of(
        st.just(records),
        st.binary(max_size=3 * RECORD),
        st.tuples(st.integers(0, len(records) - 1), st.integers(1, 255)).map(
            lambda t: records[:t[0]] + bytes([records[t[0]] ^ t[1]]) + records[t[0] + 1:]),
        st.integers(0, len(records)).map(lambda n: records[:n]),
    )
    cases = st.tuples(st.sampled_from(["none", "covered", "tail", "last"]), line,
                      st.integers(2, len(lines) - 2), prefix)

    def check(case: tuple[str, bytes, int, bytes], figures: Figures) -> None:
        where, text, i, records_now = case
        body = list(lines)
        if where == "covered":
            body[i // 2] = text
        elif where == "tail":
            body[i] = text
        elif where == "last":
            body[-1] = text
        bench.reset(b"\n".join(body) + b"\n", records_now)
        try:
            plain = bench.open(bench.plain)
            expected, kept = plain.canonical, plain.state.projection is not None
        except ctxfold.CtxfoldError:
            expected, kept = None, False
        try:
            cm = bench.open(bench.store)
            got = cm.canonical
        except ctxfold.CtxfoldError as exc:
            if expected is not None:
                figures.problem("failures", f"the vouched open refused what a plain parse "
                                f"reads: {type(exc).__name__}", short(text))
            return
        if expected is None or got != expected:
            figures.problem("failures", "the vouched open reads a different transcript",
                            short(text))
        elif cm.state.projection is not None and not kept:
            figures.problem("failures", "the vouched open kept a checkpoint a plain parse "
                            "drops", short(json.dumps([where, i])))

    return cases, check


__all__ = ["PrefixBench", "prefix_target"]
