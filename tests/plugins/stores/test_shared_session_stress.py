"""N processes on one session never wedge it (issue 29, item 5), on ``fs`` and ``postgres``.

Four real processes share one session, forty turns each (a user message, a tool call with
its result, ``prepare()``), at a window that makes them install checkpoints all the time.
Their store stalls now and then right after a read (a process descheduled on a busy
machine, a slow disk, a database far away), which is when another process's append and
install land in between. Before the fix a process that read the transcript and then the
sidecar dropped a projection that covered messages its copy of the transcript lacked, its
next receipt wrote the sidecar back without it, and from then on every prepare, in every
process, raised ``CompactionRequiredError``.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from pathlib import Path
from typing import Any

import pytest
from tests.postgres import StoreSpec

import ctxfold
from ctxfold import Config, Store

pytestmark = pytest.mark.slow

PROCESSES = 4
TURNS = 40
WINDOW = 8_000
#: A read stalls with this probability, for up to this many seconds.
STALL_RATE = 0.5
STALL_SECONDS = 0.3


class Stalling:
    """Mixed into a store: after a transcript read, sometimes wait before returning."""

    rng = random.Random()

    def _stall(self) -> None:
        if self.rng.random() < STALL_RATE:
            time.sleep(self.rng.uniform(0, STALL_SECONDS))

    def load(self, *args: Any, **kwargs: Any) -> Any:
        loaded = super().load(*args, **kwargs)  # type: ignore[misc]
        self._stall()
        return loaded

    def load_transcript(self, *args: Any, **kwargs: Any) -> Any:
        loaded = super().load_transcript(*args, **kwargs)  # type: ignore[misc]
        self._stall()
        return loaded


def stalling(spec: StoreSpec, seed: int) -> Store:
    from ctxfold.plugins.stores.fs import FsStore
    from ctxfold.plugins.stores.postgres import PostgresStore

    base: type = FsStore if spec.kind == "fs" else PostgresStore
    cls = type(f"Stalling{base.__name__}", (Stalling, base), {"rng": random.Random(seed)})
    store: Store = cls(Path(spec.where) if spec.kind == "fs" else spec.where)
    return store


def config(root: Path) -> Config:
    from tests.conftest import make_config

    return make_config(root, window=WINDOW, ratio=0.8)


def summarize(request: Any) -> str:
    return "## Goal\n- keep working\n## Progress\n- " + str(len(request.messages)) + " seen"


def _agent(spec: StoreSpec, root: str, proc: int, queue: Any) -> None:
    rng = random.Random(proc)
    errors: list[str] = []
    try:
        cm = ctxfold.open_session("shared", config=config(Path(root)),
                                  store=stalling(spec, proc), summarize=summarize)
        for turn in range(TURNS):
            call = f"call-{proc}-{turn}"
            cm.append({"role": "user", "content": f"p{proc}-{turn} go on"})
            cm.append({"role": "assistant", "content": "", "tool_calls": [{
                "id": call, "type": "function",
                "function": {"name": "bash", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": call,
                 "content": f"p{proc}-{turn} " + "word " * rng.randint(50, 500)})
            try:
                cm.prepare()
            except ctxfold.CtxfoldError as exc:
                errors.append(f"turn {turn}: {type(exc).__name__}: {exc}")
        errors.extend(n for n in cm.notices if "dropped" in n)
    except Exception as exc:  # reported, not swallowed: the parent asserts on it
        errors.append(f"{type(exc).__name__}: {exc}")
    queue.put((proc, errors))


def test_processes_on_one_session_never_wedge_it(store_spec: StoreSpec,
                                                 tmp_path: Path) -> None:
    opened = ctxfold.open_session("shared", config=config(tmp_path), store=store_spec.open(),
                                  summarize=summarize)
    opened.append({"role": "system", "content": "You are a test agent."},
                  {"role": "user", "content": "the task"})
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_agent, args=(store_spec, str(tmp_path), i, queue))
               for i in range(PROCESSES)]
    for worker in workers:
        worker.start()
    results = dict(queue.get(timeout=600) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    # No prepare failed, no process dropped a valid checkpoint.
    assert {proc: errors[:3] for proc, errors in results.items() if errors} == {}
    final = ctxfold.open_session("shared", config=config(tmp_path), store=store_spec.open(),
                                 summarize=summarize)
    assert final.state.projection is not None
    final.append({"role": "user", "content": "one more"})
    prepared = final.prepare()
    assert prepared.tokens < final.hard_ceiling
    assert prepared.messages[-1].content == "one more"
    assert len(final.canonical) == 2 + PROCESSES * TURNS * 3 + 1  # nothing lost
    users = [m.content for m in final.canonical if m.role == "user"][1:-1]
    assert sorted(users) == sorted(f"p{p}-{t} go on" for p in range(PROCESSES)
                                   for t in range(TURNS))  # nor twice
