"""Forks keep their checkpoint and say where they came from; a rewind deletes nothing."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from tests.conftest import make_config
from tests.engine.test_manager import rounds, seed

import ctxfold
from ctxfold import SessionError
from ctxfold.engine import lineage
from ctxfold.plugins.stores.fs import FsStore
from ctxfold.testing import RecordingSummarizer


def folded(open_session, session_id: str = "s"):
    cm = open_session(session_id, window=20_000, ratio=0.5, summarizer=RecordingSummarizer())
    seed(cm)
    rounds(cm, 30, 1_500)
    cm.prepare()
    assert cm.state.projection is not None
    return cm


@pytest.mark.parametrize("where", ["before", "at", "after"])
def test_a_fork_keeps_the_checkpoint_it_lies_beyond(open_session, where: str) -> None:
    cm = folded(open_session)
    covered = cm.state.projection.covered_count
    upto = {"before": covered - 1, "at": covered, "after": covered + 2}[where]
    fork = cm.fork("f", upto)
    assert len(fork.canonical) == upto and not fork.notices
    if where == "before":
        assert fork.state.projection is None  # it would cover messages the fork lacks
        assert fork.view() == list(fork.canonical)
    else:
        assert fork.state.projection == cm.state.projection  # validated, kept as it is
        assert fork.view() == [*cm.state.projection.messages, *fork.canonical[covered:]]
        assert fork.prepare().projection_version == cm.state.projection.projection_version
    point = fork.fork_point
    assert (point.parent, point.at, point.reason) == ("s", upto, "fork")
    assert cm.fork_point is None


def test_a_carried_over_checkpoint_is_validated_like_the_sessions_own(tmp_path: Path) -> None:
    """The fork's projection is checked against the fork's transcript (covered-prefix hash):
    a fork whose copied prefix no longer matches falls back to its transcript."""
    config = make_config(tmp_path, window=20_000)
    cm = ctxfold.open_session("s", config=config, summarizer=RecordingSummarizer())
    seed(cm)
    rounds(cm, 30, 1_500)
    cm.prepare()
    covered = cm.state.projection.covered_count
    cm.fork("f", covered)
    path = Path(config.store.path) / "f.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"Fix the bug", b"Fix the BUG")  # same count, other bytes
    path.write_bytes(b"".join(lines))
    fork = ctxfold.open_session("f", config=config, summarizer=RecordingSummarizer(),
                                create=False)
    assert fork.state.projection is None
    assert any("no longer matches" in n for n in fork.notices)


def test_a_rewind_keeps_the_history_as_a_session_of_its_own(open_session) -> None:
    cm = folded(open_session)
    before = cm.canonical
    projection = cm.state.projection
    kept = cm.rewind(3)
    assert kept == "s-rewound-1" and len(cm.canonical) == 3
    assert cm.state.projection is None
    again = cm.fork("unrelated")  # the store still works on the rewound session
    assert len(again.canonical) == 3
    history = ctxfold.open_session(kept, config=cm.config, summarizer=RecordingSummarizer(),
                                   store=cm.store, create=False)
    assert history.canonical == before  # every message, byte for byte
    assert history.state.projection == projection  # and its checkpoint
    point = history.fork_point
    assert (point.parent, point.at, point.reason) == ("s", 3, "rewind")
    assert cm.rewind(2) == "s-rewound-2"
    assert cm.rewind(2) == ""  # nothing dropped: nothing kept
    assert sorted(cm.store.list_sessions()) == ["s", "s-rewound-1", "s-rewound-2", "unrelated"]
    with pytest.raises(SessionError, match="upto"):
        cm.rewind(7)
    assert len(cm.store.list_sessions()) == 4


def test_a_store_without_keep_as_still_keeps_the_history(tmp_path: Path) -> None:
    class OldStore(FsStore):  # a store written before rewind took keep_as
        def rewind(self, session_id: str, upto: int) -> None:  # type: ignore[override]
            super().rewind(session_id, upto)

    store = OldStore(tmp_path)
    store.create("s")
    store.append("s", [ctxfold.Message(role="user", content=str(i)) for i in range(4)])
    assert lineage.rewind(store, "s", 1) == "s-rewound-1"
    assert [m.content for m in store.load("s-rewound-1")] == ["0", "1", "2", "3"]
    assert [m.content for m in store.load("s")] == ["0"]
    assert lineage.rewind(store, "s", 1) == ""
    with pytest.raises(SessionError, match="upto"):
        lineage.rewind(store, "s", 3)
    assert store.list_sessions() == ["s", "s-rewound-1"]


def test_a_long_id_keeps_its_rewound_history_under_a_valid_id(tmp_path: Path) -> None:
    store = FsStore(tmp_path)
    long = "x" * 128
    store.create(long)
    store.append(long, [ctxfold.Message(role="user", content="a")] * 2)
    kept = lineage.rewind(store, long, 0)
    assert kept == "x" * 100 + "-rewound-1" and len(store.load(kept)) == 2
    assert json.loads((tmp_path / f"{kept}.parent.json").read_bytes())["parent"] == long


def test_a_script_run_twice_is_told_it_appended_its_system_message_again(
        tmp_path: Path) -> None:
    config = make_config(tmp_path)
    opening = ({"role": "system", "content": "You are a coding agent."},
               {"role": "user", "content": "Fix the failing test."})
    first = ctxfold.open_session("s", config=config, summarizer=RecordingSummarizer())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the first run: nothing to say
        first.append(*opening)
        first.append({"role": "system", "content": "A new, different instruction."})
    again = ctxfold.open_session("s", config=config, summarizer=RecordingSummarizer())
    with pytest.warns(ctxfold.SessionWarning, match=r"'s': a system message it already holds "
                                                    r"was appended again"):
        again.append(*opening)
    assert any("cm.canonical" in n for n in again.notices)
    assert len(again.canonical) == 5  # still appended: a host may mean it
