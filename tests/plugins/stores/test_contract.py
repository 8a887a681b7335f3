"""The store contract (``ctxfold.Store``, ``docs/stores.md``), run on ``fs`` and ``postgres``.

Anything a store must guarantee for ctxfold to keep "nothing is ever lost" is in the shipped
suite, :class:`ctxfold.testing.StoreContract`, so a third-party store runs the same tests;
what needs this repository's engine fixtures is here, and what only one store has (the fs
store's torn lines and file modes) is in its own test module.
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest
from tests.postgres import StoreSpec

from ctxfold import Message
from ctxfold.testing import StoreContract


class TestBuiltinStores(StoreContract):
    """The shipped suite on ``fs`` and ``postgres`` (``store_spec`` in conftest)."""

    @pytest.fixture
    def open_store(self, store_spec: StoreSpec):
        return store_spec.open


def _agent(spec: StoreSpec, root: str, name: str, turns: int, queue) -> None:
    from tests.conftest import make_config

    import ctxfold
    from ctxfold.testing import RecordingSummarizer

    store = spec.open()
    cm = ctxfold.open_session("agents", config=make_config(Path(root), window=12_000,
                                                           ratio=0.5),
                              store=store, summarizer=RecordingSummarizer())
    missing = 0
    for turn in range(turns):
        cm.append(Message(role="user", content=f"{name}-{turn} " + "y" * 400))
        committed = {m.content for m in store.load("agents")}
        view = {m.content for m in cm.prepare().messages}
        projection = cm.state.projection
        covered = projection.covered_count if projection else 0
        tail = {m.content for m in store.load("agents")[covered:]} & committed
        missing += len(tail - view)
    queue.put(missing)


def test_workers_on_one_session_never_prepare_a_view_missing_a_committed_message(
        store_spec: StoreSpec, tmp_path: Path) -> None:
    store = store_spec.open()
    store.create("agents")
    store.append("agents", [Message(role="system", content="sys"),
                            Message(role="user", content="task")])
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    procs = [context.Process(target=_agent, args=(store_spec, str(tmp_path), f"w{i}", 20,
                                                  queue)) for i in range(3)]
    for proc in procs:
        proc.start()
    missing = [queue.get(timeout=240) for _ in procs]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert missing == [0, 0, 0]
    loaded = store.load("agents")
    assert len(loaded) == 2 + 3 * 20 and len({m.content for m in loaded}) == len(loaded)
    assert json.loads(store.read_sidecar("agents") or b"{}").get("projection") is not None
