"""Several processes on one session (design §1.4): every prepare works from the stored state.

Two ``ContextManager`` objects on one store path stand for two processes (each keeps its own
copy in memory, exactly as separate processes do); the last test runs real processes.
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import make_config

import ctxfold
from ctxfold import Action, Message
from ctxfold.plugins.stores.fs import FsStore
from ctxfold.testing import RecordingSummarizer


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
    assert receipt is not None and receipt.status is Action.BLOCKED
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
    assert receipt is not None and receipt.status is Action.APPLIED
    stored = json.loads(sidecar(a).read_text())
    assert stored["projection"]["projection_version"] == 1
    assert [t["kind"] for t in stored["telemetry"]][-2:] == ["resume", "install"]
    assert a.prepare().messages[-1].content == "from b"
    assert prepared.projection_version == 1


# -- issue 29 item 5: a checkpoint another process installs while this one reads -----------


class HookedStore(FsStore):
    """The fs store with a hook run once right after the next transcript read or sidecar
    read: another process acting exactly between this process's two reads."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.after_transcript: Callable[[], None] | None = None
        self.after_sidecar: Callable[[], None] | None = None

    def _fire(self, name: str) -> None:
        hook = getattr(self, name)
        setattr(self, name, None)
        if hook is not None:
            hook()

    def load(self, session_id: str, *, repair: bool = True) -> list[Message]:
        loaded = super().load(session_id, repair=repair)
        self._fire("after_transcript")
        return loaded

    def load_transcript(self, session_id: str) -> Any:
        loaded = super().load_transcript(session_id)
        self._fire("after_transcript")
        return loaded

    def read_sidecar(self, session_id: str) -> bytes | None:
        data = super().read_sidecar(session_id)
        self._fire("after_sidecar")
        return data


def long_session(tmp_path: Path) -> Any:
    """``b``: a session far longer than its 8,000-token window, kept small by checkpoints."""
    b = ctxfold.open_session("s", config=make_config(tmp_path, window=8_000, ratio=0.8),
                             summarizer=RecordingSummarizer())
    seed(b)
    for i in range(120):
        b.append(user(f"b{i} " + "z " * 300))
        b.prepare()
    assert b.state.projection is not None and b.estimate() < b.trigger_tokens
    return b


def stored_version(cm: Any) -> int | None:
    projection = json.loads(sidecar(cm).read_text())["projection"]
    return None if projection is None else projection["projection_version"]


def hooked(tmp_path: Path) -> tuple[Any, HookedStore]:
    store = HookedStore(tmp_path / "sessions")
    cm = ctxfold.open_session("s", config=make_config(tmp_path, window=8_000, ratio=0.8),
                              store=store, summarizer=RecordingSummarizer())
    return cm, store


def install_more(b: Any) -> None:
    """``b`` appends more than the verbatim tail holds, then installs a checkpoint: the new
    projection covers messages appended after the moment this runs."""
    for i in range(6):
        b.append(user(f"from b while a reads {i} " + "q " * 300))
    b.compact()


def test_a_checkpoint_installed_between_two_reads_of_a_resync_is_kept(tmp_path: Path) -> None:
    """Another process appends and installs between this process's read of the transcript
    and its read of the sidecar: the new projection covers messages this process's copy of
    the transcript lacks. It used to be dropped as invalid, the full transcript (three times
    the window) could not be folded under the hard ceiling, and the receipt saying so was
    written over the checkpoint — every process's prepare raised CompactionRequiredError."""
    b = long_session(tmp_path)
    a, store = hooked(tmp_path)
    b.append(user("a move a's next prepare notices"))
    before = stored_version(b)
    store.after_transcript = lambda: install_more(b)
    a.prepare()
    assert store.after_transcript is None  # the race happened
    assert not [n for n in a.notices if "dropped" in n]
    assert stored_version(b) == (before or 0) + 1  # b's checkpoint is still the stored one
    for cm in (a, b, ctxfold.open_session("s", config=b.config,
                                          summarizer=RecordingSummarizer())):
        cm.append(user("next turn"))
        assert cm.prepare().messages[-1].content == "next turn"


def test_a_checkpoint_installed_while_a_process_opens_the_session_is_kept(
        tmp_path: Path) -> None:
    b = long_session(tmp_path)
    before = stored_version(b)
    store = HookedStore(tmp_path / "sessions")
    store.after_transcript = lambda: install_more(b)
    a = ctxfold.open_session("s", config=b.config, store=store,
                             summarizer=RecordingSummarizer())
    assert store.after_transcript is None
    assert not [n for n in a.notices if "dropped" in n]
    a.resume()  # a sidecar write: it must not undo b's checkpoint
    assert stored_version(b) == (before or 0) + 1
    a.append(user("next turn"))
    assert a.prepare().messages[-1].content == "next turn"


def test_a_process_that_opens_while_another_installs_never_writes_over_that_install(
        tmp_path: Path) -> None:
    """The sidecar changes between the read that gives an opening process its state and the
    bytes its compare-and-swap expects: its first write must lose, not overwrite."""
    b = long_session(tmp_path)
    before = stored_version(b)
    store = HookedStore(tmp_path / "sessions")
    store.after_sidecar = lambda: install_more(b)
    a = ctxfold.open_session("s", config=b.config, store=store,
                             summarizer=RecordingSummarizer())
    assert store.after_sidecar is None
    a.resume()
    assert stored_version(b) == (before or 0) + 1
    assert a.state.projection is not None
    assert a.state.projection.projection_version == (before or 0) + 1


def test_a_prepare_that_loses_its_install_above_the_hard_ceiling_tries_again(
        tmp_path: Path) -> None:
    """Another process installs while this one waits for its summary, then appends more
    than the window holds: the re-read view is still above the hard ceiling. With summary
    attempts left, the prepare folds again instead of raising CompactionRequiredError."""
    summarizer = RecordingSummarizer()
    config = make_config(tmp_path, window=8_000, ratio=0.8)
    a = ctxfold.open_session("s", config=config, summarizer=summarizer)
    seed(a)
    for i in range(60):
        a.append(user(f"a{i} " + "z " * 300))
    assert a.estimate() >= a.hard_ceiling
    b = ctxfold.open_session("s", config=config, summarizer=RecordingSummarizer())

    def race(_request: Any) -> None:
        if len(summarizer.requests) == 1:
            b.compact()
            for i in range(25):
                b.append(user(f"b{i} " + "y " * 300))
            assert b.estimate() >= b.hard_ceiling

    summarizer.before = race
    prepared = a.prepare()
    assert len(summarizer.requests) == 2
    assert prepared.tokens < a.hard_ceiling
    assert prepared.messages[-1].content.startswith("b24 ")
    receipt = a.state.last_receipt
    assert receipt is not None and receipt.status is Action.APPLIED
