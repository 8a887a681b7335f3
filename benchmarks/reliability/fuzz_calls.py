"""Fuzz targets over calls with host- or model-controlled input: ``cm.use_capability(arguments)``
(the model writes them) and ``cm.append(...)`` with arbitrary dicts and values.

Only a :class:`ctxfold.CtxfoldError` may escape; ``use_capability`` answers with text; a
failed append writes nothing; a successful one reads back equal after reopening; no call
changes bytes it should not.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

from benchmarks.reliability.common import Figures, load, open_quiet, short, tag_summary
from benchmarks.reliability.common import write_config as offline_config
from benchmarks.reliability.fuzz_values import (
    HUGE,
    INTS,
    SURROGATES,
    TEXT,
    VALUES,
    dumps,
    run_targets,
)
from benchmarks.reliability.worker import call, filler, result, user
from hypothesis import strategies as st

import ctxfold

WINDOW = 40_000
FRESH_EVERY = 250  # appends grow the session: a new one every so many cases


class Calls:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.config = load(offline_config(work, work / "sessions"))
        self.registry = ctxfold.Registry.from_config(self.config.config)
        self.number = 0
        self.cm = self.fresh()
        big = next(m for m in self.cm.canonical if m.tool_call_id == "c1")
        self.ref = re.search(r"result_ref=(\S+)", big.content).group(1)  # type: ignore[union-attr]

    def fresh(self) -> Any:
        self.number += 1
        self.session = f"calls-{self.number}"
        rng = random.Random(self.number)
        cm = self.open(create=True)
        cm.append({"role": "system", "content": "#c0-0a# You are a test agent."},
                  user("c0-0b", "start"),
                  call("c0-1a", "c1"), result("c0-1b", "c1", "é漢🙂" + filler(rng, 200_000)),
                  call("c0-2a", "c2"), result("c0-2b", "c2", "small"))
        return cm

    def open(self, create: bool = False) -> Any:
        return open_quiet(self.session, config=self.config, window=WINDOW, create=create,
                          summarize=tag_summary, registry=self.registry)

    def transcript(self) -> bytes:
        return (self.work / "sessions" / f"{self.session}.jsonl").read_bytes()


def capability_target(calls: Calls) -> tuple[Any, Any]:
    number = st.one_of(INTS, st.floats(), TEXT, st.just("1" * 5000), st.just("-0"),
                       st.sampled_from([0, 1, 16384, 24576, 24577, 10**6, -1]), VALUES)
    inner = st.fixed_dictionaries({}, optional={
        "tool_call_id": st.one_of(st.sampled_from(["c1", "c2", "c9", ""]), TEXT, VALUES),
        "result_ref": st.one_of(st.just(calls.ref), TEXT, VALUES),
        "offset": number, "limit": number,
    })
    inner_forms = st.one_of(
        inner, inner.map(lambda d: dumps(d)),  # the inner arguments as a JSON string
        st.just('{"tool_call_id": "c1", "offset": 1' + "0" * 5000 + "}"),
        st.sampled_from(['{"tool_call_id": "c1", "offset": ' + "[" * 50_000, "[]", "5", ""]),
        VALUES)
    arguments = st.one_of(
        st.fixed_dictionaries({"action": st.one_of(st.sampled_from(["list", "call"]), VALUES)},
                              optional={"capability_id": st.one_of(
                                  st.just("session:tool_result"), TEXT, VALUES),
                                  "arguments": inner_forms}),
        st.fixed_dictionaries({"action": st.just("call"),
                               "capability_id": st.just("session:tool_result"),
                               "arguments": inner_forms}),
        VALUES, inner_forms)

    def check(args: Any, figures: Figures) -> None:
        before = calls.transcript()
        if isinstance(args, str) and HUGE in args:
            args = args.replace(HUGE, "9" * 5000)
        answer = calls.cm.use_capability(args)
        if not isinstance(answer, str):
            figures.problem("failures", "use_capability answered with a non-string",
                            short(answer))
        if calls.transcript() != before:
            figures.problem("mutations", "use_capability changed the transcript")

    return arguments, check


ROLES = st.one_of(st.sampled_from(["system", "user", "assistant", "tool", "developer"]), VALUES)
TOOL_CALL = st.fixed_dictionaries({
    "id": st.one_of(st.sampled_from(["n1", "n2", "c2"]), TEXT, VALUES),
    "type": st.one_of(st.just("function"), VALUES),
    "function": st.one_of(st.fixed_dictionaries({
        "name": st.one_of(st.just("bash"), TEXT, VALUES),
        "arguments": st.one_of(st.just("{}"), TEXT, VALUES)}), VALUES)})
PARTS = st.lists(st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(["text", "image_url", "input_text", "input_audio",
                                        "file", "refusal"]), VALUES)},
    optional={"text": st.one_of(TEXT, VALUES), "image_url": VALUES}), max_size=3)
CONTENT = st.one_of(TEXT, VALUES, PARTS, st.integers(0, 120_000).map(lambda n: "x" * n),
                    SURROGATES.map(lambda s: f"a{s}b"))
MESSAGE = st.fixed_dictionaries({"role": ROLES}, optional={
    "content": CONTENT, "tool_calls": st.one_of(st.lists(TOOL_CALL, max_size=2), VALUES),
    "tool_call_id": st.one_of(st.sampled_from(["n1", "n2", "c2", "c1"]), TEXT, VALUES),
    "name": st.one_of(TEXT, VALUES), "reasoning_content": st.one_of(TEXT, VALUES),
    "id": st.one_of(TEXT, VALUES), "extra_field": VALUES,
})
ITEM = st.fixed_dictionaries({"type": st.one_of(st.sampled_from(
    ["message", "function_call", "function_call_output", "reasoning"]), VALUES)}, optional={
    "role": ROLES, "content": CONTENT, "call_id": st.one_of(st.sampled_from(["n1", "c2"]),
                                                            VALUES),
    "name": st.one_of(TEXT, VALUES), "arguments": st.one_of(TEXT, VALUES),
    "output": st.one_of(TEXT, VALUES), "id": st.one_of(TEXT, VALUES)})
#: Mostly well-formed messages with one odd field, and call + result pairs, so that many
#: batches are accepted and reach the store and the read-back.
PLAUSIBLE = st.tuples(st.sampled_from(["user", "assistant", "system", "developer"]),
                      st.text(max_size=200), st.dictionaries(
                          st.sampled_from(["name", "id", "reasoning_content", "refusal",
                                           "audio", "metadata", "content"]),
                          st.one_of(st.text(max_size=20), VALUES), max_size=1)).map(
    lambda r: {"role": r[0], "content": r[1], **r[2]})
PAIR = st.tuples(st.text(min_size=1, max_size=12), st.one_of(st.text(max_size=50), VALUES),
                 CONTENT).map(lambda r: [
                     {"role": "assistant", "content": "", "tool_calls": [{
                         "id": r[0], "type": "function",
                         "function": {"name": "bash", "arguments": r[1]}}]},
                     {"role": "tool", "tool_call_id": r[0], "content": r[2]}])
BATCHES = st.one_of(
    st.lists(st.one_of(MESSAGE, PLAUSIBLE, PLAUSIBLE, ITEM, VALUES), min_size=1, max_size=3),
    PAIR, st.tuples(PLAUSIBLE, PAIR).map(lambda r: [r[0], *r[1]]))


def clean(value: Any) -> Any:
    """Expand the huge-number placeholder into a real int (ctxfold gets a Python value)."""
    if value == HUGE:
        return 10**4000
    if isinstance(value, list):
        return [clean(v) for v in value]
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    return value


def append_target(calls: Calls) -> tuple[Any, Any]:
    count = 0

    def check(batch: list[Any], figures: Figures) -> None:
        nonlocal count
        count += 1
        if count % FRESH_EVERY == 0:
            calls.cm = calls.fresh()
        batch = clean(batch)
        before = calls.transcript()
        length = len(calls.cm.canonical)
        try:
            calls.cm.append(*batch)
        except ctxfold.CtxfoldError:
            if calls.transcript() != before or len(calls.cm.canonical) != length:
                figures.problem("failures", "a refused append wrote something", short(batch))
            raise
        figures.note("fuzz_append_accepted")
        try:
            again = calls.open()
        except ctxfold.CtxfoldError as exc:
            figures.problem("failures", f"an accepted append makes the session unreadable: "
                            f"{type(exc).__name__}", short(batch, 300))
            calls.cm = calls.fresh()
            return
        if again.canonical != calls.cm.canonical:
            figures.problem("failures", "an accepted append reads back differently",
                            short(batch, 300))
        json.dumps(ctxfold.to_openai(again.prepare()), ensure_ascii=False).encode()

    return BATCHES, check


TARGETS = {"capability": capability_target, "append": append_target}


def run(examples: int, work: Path, *, seed: int = 0, targets: tuple[str, ...] = tuple(TARGETS),
        log: Any = None) -> Figures:
    return run_targets(TARGETS, Calls(work), examples, seed, targets, log)
