"""Several processes on one session (SPEC §4.2): every prepare works from the stored state.

Two ``ContextManager`` objects on one store path stand for two processes (each keeps its own
copy in memory, exactly as separate processes do); the last test runs real processes.
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from tests.conftest import RecordingSummarizer, make_config

import ctxfold
from ctxfold.kernel.state import ReceiptStatus
from ctxfold.kernel.types import Message


def user(text: str) -> Message:
    return Message(role="user", content=text)


def seed(cm) -> None:
    cm.append(Message(role="system", content="You are a coding agent."), user("the task"))


def contents(messages) -> list[str]:
    return [m.content for m in messages]


def worker(open_session, summarizer=None):
    """Another process's manager on the session, at a window where 30 notes need a fold."""
    return open_session(window=20_000, ratio=0.5, summarizer=summarizer or RecordingSummarizer())


def at_the_trigger(open_session, summarizer=None):
    cm = worker(open_session, summarizer)
    seed(cm)
    for i in range(30):
        cm.append(user(f"note {i} " + "x" * 1_200))
    return cm


def sidecar(cm) -> Path:
    return Path(cm.config.store.path) / f"{cm.session_id}.context.json"


def test_a_prepare_sees_what_another_process_appended(open_session) -> None:
    a = open_session()
    seed(a)
    b = open_session()
    b.append(user("from b"))
    a.append(user("from a"))  # a's append lands after b's on disk
    view = contents(a.prepare().messages)
    assert view[-2:] == ["from b", "from a"]
    assert contents(a.canonical) == contents(b.store.load("s"))


def test_a_tool_result_may_answer_a_call_another_process_made(open_session) -> None:
    a = open_session()
    seed(a)
    b = open_session()
    b.append(Message(role="assistant", content="", tool_calls=(
        ctxfold.ToolCall(id="call-b", name="bash", arguments="{}"),)))
    a.append(Message(role="tool", content="ok", tool_call_id="call-b", name="bash"))
    assert contents(a.canonical)[-1] == "ok"


def test_a_checkpoint_installed_elsewhere_is_used_and_later_appends_follow_it(
        open_session) -> None:
    a = at_the_trigger(open_session)
    b = worker(open_session)
    b.compact()
    assert b.state.projection is not None
    b.append(user("after b's checkpoint"))
    prepared = a.prepare()
    assert prepared.projection_version == b.state.projection.projection_version
    assert prepared.messages[-1].content == "after b's checkpoint"
    assert any("summary #1" in m.content for m in prepared.messages)


def test_an_install_that_loses_to_another_process_is_blocked_and_its_view_complete(
        open_session) -> None:
    summarizer = RecordingSummarizer()
    a = at_the_trigger(open_session, summarizer)

    def race(_request) -> None:  # b commits while a is waiting for its summary
        b = worker(open_session)
        b.append(user("from b"))
        b.compact()

    summarizer.before = race
    prepared = a.compact()
    receipt = a.state.last_receipt
    assert receipt is not None and receipt.status is ReceiptStatus.BLOCKED
    assert prepared.messages[-1].content == "from b"
    stored = json.loads(sidecar(a).read_text())
    assert stored["projection"]["projection_version"] == 1  # b's install was not overwritten
    assert stored["generation"] == a.state.generation  # a's receipt came after b's commit


def test_an_adopted_projection_that_does_not_match_the_transcript_is_dropped(
        open_session) -> None:
    summarizer = RecordingSummarizer()
    a = at_the_trigger(open_session, summarizer)
    b = worker(open_session)
    b.compact()
    forged = json.loads(sidecar(b).read_text())
    forged["projection"]["covered_prefix_hash"] = "0" * 64  # covers a transcript that isn't
    forged["projection"]["messages"][1]["content"] = "FORGED"
    forged["generation"] += 5

    def race(_request) -> None:
        sidecar(b).write_text(json.dumps(forged))

    summarizer.before = race
    a.compact()  # loses the compare-and-swap, adopts the stored state, validates it
    view = contents(a.prepare().messages)
    assert "FORGED" not in " ".join(view)
    assert any("saved projection dropped" in n for n in a.notices)


def test_a_rewind_elsewhere_is_seen_before_the_next_prepare(open_session) -> None:
    a = open_session()
    seed(a)
    a.append(user("one"), user("two"))
    b = open_session()
    b.rewind(2)
    assert contents(a.prepare().messages) == ["You are a coding agent.", "the task"]


def _worker(root: str, name: str, turns: int, queue) -> None:
    config = make_config(Path(root), window=12_000, ratio=0.5)
    cm = ctxfold.open_session("shared", config=config, summarizer=RecordingSummarizer())
    missing = 0
    for turn in range(turns):
        cm.append(user(f"{name}-{turn} " + "y" * 400))
        committed = {m.content for m in cm.store.load("shared")}
        view = cm.prepare().messages
        state = cm.state
        covered = state.projection.covered_count if state.projection else 0
        # Every message committed before this prepare and not folded into a checkpoint
        # must be in the view.
        tail = {m.content for m in cm.store.load("shared")[covered:]} & committed
        missing += len(tail - {m.content for m in view})
    queue.put(missing)


def test_processes_on_one_session_never_prepare_a_view_missing_a_committed_message(
        tmp_path: Path) -> None:
    opened = ctxfold.open_session("shared", config=make_config(tmp_path, window=12_000,
                                                                ratio=0.5),
                                  summarizer=RecordingSummarizer())
    seed(opened)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_worker, args=(str(tmp_path), f"p{i}", 25, queue))
               for i in range(3)]
    for w in workers:
        w.start()
    results = [queue.get(timeout=240) for _ in workers]
    for w in workers:
        w.join(timeout=60)
        assert w.exitcode == 0
    assert results == [0, 0, 0]
    stored = contents(opened.store.load("shared"))
    assert len(stored) == 2 + 3 * 25  # no append lost


def test_a_receipt_another_process_records_meanwhile_does_not_defeat_an_install(
        open_session) -> None:
    summarizer = RecordingSummarizer()
    a = at_the_trigger(open_session, summarizer)

    def race(_request) -> None:  # b writes the sidecar (a resume label), installs nothing
        b = worker(open_session)
        b.resume()
        b.append(user("from b"))

    summarizer.before = race
    prepared = a.compact()
    receipt = a.state.last_receipt
    assert receipt is not None and receipt.status is ReceiptStatus.APPLIED
    stored = json.loads(sidecar(a).read_text())
    assert stored["projection"]["projection_version"] == 1
    assert [t["kind"] for t in stored["telemetry"]][-2:] == ["resume", "install"]
    assert a.prepare().messages[-1].content == "from b"
    assert prepared.projection_version == 1
