"""``ctxfold sessions list|show|fork|rewind|delete`` (explicit user operations, design §1.1)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from ctxfold import Message, ToolCall
from ctxfold.capabilities.bounding import make_tool_result
from ctxfold.cli.main import main

BIG = "line of output\n" * 4000  # ~60 KB: bounded to 32 KiB at creation


class Tty(io.StringIO):
    """A stdin that claims to be a terminal and answers with its text."""

    def isatty(self) -> bool:
        return True


class Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from ctxfold.plugins.stores.fs import FsStore

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXFOLD_CONFIG_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "stdin", Pipe(""))
    directory = tmp_path / "sessions"
    store = FsStore(directory)
    store.create("s1")
    store.append("s1", [
        Message(role="user", content="read the log"),
        Message(role="assistant", tool_calls=(ToolCall(id="c1", name="cat", arguments="{}"),)),
        make_tool_result("c1", BIG, tool_name="cat"),
        Message(role="assistant", content="done"),
    ])
    store.create("s2")
    store.append("s2", [Message(role="user", content="hi")])
    return directory


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def files_of(root: Path, session: str) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.lstrip(".").startswith(session))


def test_list_json_and_text(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "sessions", "list", "--root", str(root), "--json")
    assert (code, err) == (0, "")
    rows = json.loads(out)
    assert [(r["id"], r["messages"], r["projection_version"]) for r in rows] == [
        ("s1", 4, 0), ("s2", 1, 0)]
    assert all(r["last_activity"].endswith("Z") for r in rows)
    code, out, _ = run(capsys, "sessions", "list", "--root", str(root))
    assert code == 0
    assert out.splitlines()[0].split() == ["ID", "MESSAGES", "LAST", "ACTIVITY", "VERSION",
                                           "FORKED", "FROM"]
    assert out.splitlines()[1].split()[:2] == ["s1", "4"]
    assert out.splitlines()[1].split()[-1] == "-"


def test_list_shows_how_sessions_relate(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "sessions", "fork", "s1", "s3", "--at", "2", "--root", str(root))[0] == 0
    assert run(capsys, "sessions", "rewind", "s1", "1", "--yes", "--root", str(root))[0] == 0
    _, out, _ = run(capsys, "sessions", "list", "--root", str(root), "--json")
    parents = {r["id"]: r["parent"] and (r["parent"]["parent"], r["parent"]["at"],
                                         r["parent"]["reason"]) for r in json.loads(out)}
    assert parents == {"s1": None, "s1-rewound-1": ("s1", 1, "rewind"), "s2": None,
                       "s3": ("s1", 2, "fork")}
    _, text, _ = run(capsys, "sessions", "list", "--root", str(root))
    rows = {line.split()[0]: line for line in text.splitlines()[1:]}
    assert rows["s3"].endswith("s1@2") and rows["s1-rewound-1"].endswith("s1@1 (rewind)")


def test_list_reads_projection_version(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (root / "s2.context.json").write_text(json.dumps(
        {"schema_version": 3, "projection": {"projection_version": 7}}))
    _, out, _ = run(capsys, "sessions", "list", "--root", str(root), "--json")
    assert {r["id"]: r["projection_version"] for r in json.loads(out)} == {"s1": 0, "s2": 7}


def test_list_empty_root(tmp_path: Path, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sessions", "list", "--root", str(tmp_path / "none"))
    assert code == 0 and "no sessions" in out
    assert not (tmp_path / "none").exists()


def test_show_bounded_and_raw(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sessions", "show", "s1", "--root", str(root), "--json")
    assert code == 0
    messages = json.loads(out)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert "raw_content" not in messages[2]
    assert len(messages[2]["content"].encode()) <= 32768
    _, out, _ = run(capsys, "sessions", "show", "s1", "--root", str(root), "--json", "--raw")
    assert json.loads(out)[2]["raw_content"] == BIG
    _, text, _ = run(capsys, "sessions", "show", "s1", "--root", str(root))
    assert "[2] tool (cat c1) {bounded}" in text and "-> cat({}) id=c1" in text
    assert text.count("line of output") < BIG.count("line of output")
    _, raw_text, _ = run(capsys, "sessions", "show", "s1", "--root", str(root), "--raw")
    assert raw_text.count("line of output") == BIG.count("line of output")


def test_fork_prefix(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "sessions", "fork", "s1", "s3", "--at", "2", "--root", str(root))
    assert (code, err) == (0, "")
    assert "s1 -> s3 (2 messages)" in out
    _, shown, _ = run(capsys, "sessions", "show", "s3", "--root", str(root), "--json")
    _, full, _ = run(capsys, "sessions", "show", "s1", "--root", str(root), "--json")
    assert json.loads(shown) == json.loads(full)[:2]
    code, _, err = run(capsys, "sessions", "fork", "s1", "s2", "--root", str(root))
    assert code == 1 and "'s2' already exists" in err
    code, _, err = run(capsys, "sessions", "fork", "s1", "s4", "--at", "9", "--root", str(root))
    assert code == 1 and "upto=9" in err and not (root / "s4.jsonl").exists()


def test_rewind_with_yes(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = (root / "s1.jsonl").read_bytes()
    code, out, _ = run(capsys, "sessions", "rewind", "s1", "1", "--yes", "--root", str(root))
    assert code == 0 and "dropped 3" in out and "s1-rewound-1" in out
    _, out, _ = run(capsys, "sessions", "show", "s1", "--root", str(root), "--json")
    assert [m["content"] for m in json.loads(out)] == ["read the log"]
    # Nothing was deleted: the history as it was is a session of its own, byte for byte.
    assert (root / "s1-rewound-1.jsonl").read_bytes() == before


def test_rewind_dry_run_and_json(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted(p.name for p in root.iterdir())
    code, out, _ = run(capsys, "sessions", "rewind", "s1", "1", "--dry-run", "--root",
                       str(root))
    assert code == 0 and "would rewind s1 to 1 messages" in out and "s1-rewound-1" in out
    code, out, _ = run(capsys, "sessions", "rewind", "s1", "1", "--dry-run", "--json",
                       "--root", str(root))
    assert json.loads(out) == {"session": "s1", "messages": 4, "kept": 1, "dropped": 3,
                               "history": "s1-rewound-1", "dry_run": True}
    assert sorted(p.name for p in root.iterdir()) == before  # a dry run writes nothing
    code, out, _ = run(capsys, "sessions", "rewind", "s1", "2", "--yes", "--json",
                       "--root", str(root))
    assert code == 0 and json.loads(out)["history"] == "s1-rewound-1"
    assert not json.loads(out)["dry_run"]
    code, out, _ = run(capsys, "sessions", "rewind", "s1", "2", "--yes", "--json",
                       "--root", str(root))
    assert json.loads(out)["dropped"] == 0 and json.loads(out)["history"] == ""


def test_fork_json(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sessions", "fork", "s1", "s3", "--at", "2", "--json",
                       "--root", str(root))
    report = json.loads(out)
    assert code == 0 and (report["session"], report["fork"], report["messages"]) == (
        "s1", "s3", 2)
    assert (report["parent"]["parent"], report["parent"]["at"]) == ("s1", 2)


def test_delete_dry_run_lists_exactly_what_goes(root: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    (root / "s1.context.json").write_text("{}")
    before = sorted(p.name for p in root.iterdir())
    code, out, _ = run(capsys, "sessions", "delete", "s1", "--dry-run", "--json", "--root",
                       str(root))
    report = json.loads(out)
    assert code == 0 and report["dry_run"] and report["messages"] == 4
    assert sorted(Path(p).name for p in report["removes"]) == [
        "s1.context.json", "s1.jsonl", "s1.lock"]
    assert sorted(p.name for p in root.iterdir()) == before
    code, out, _ = run(capsys, "sessions", "delete", "s1", "--yes", "--json", "--root",
                       str(root))
    assert code == 0 and not json.loads(out)["dry_run"]
    assert files_of(root, "s1") == []


def test_show_previews_long_messages(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ctxfold.plugins.stores.fs import FsStore

    FsStore(root).append("s2", [Message(role="assistant", content="x" * 20_000)])
    _, text, _ = run(capsys, "sessions", "show", "s2", "--root", str(root))
    assert len(text) < 2_000 and "18,800 more characters" in text and "--full" in text
    _, full, _ = run(capsys, "sessions", "show", "s2", "--root", str(root), "--full")
    assert "x" * 20_000 in full


def test_rewind_refuses_without_terminal(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = (root / "s1.jsonl").read_bytes()
    code, _, err = run(capsys, "sessions", "rewind", "s1", "1", "--root", str(root))
    assert code == 1 and "not a terminal" in err and "--yes" in err
    assert (root / "s1.jsonl").read_bytes() == before


def test_rewind_asks_on_terminal(root: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    before = (root / "s1.jsonl").read_bytes()
    monkeypatch.setattr(sys, "stdin", Tty("n\n"))
    code, out, err = run(capsys, "sessions", "rewind", "s1", "2", "--root", str(root))
    assert code == 1 and "not confirmed" in err and "[y/N]" in out
    assert (root / "s1.jsonl").read_bytes() == before
    monkeypatch.setattr(sys, "stdin", Tty("y\n"))
    code, _, _ = run(capsys, "sessions", "rewind", "s1", "2", "--root", str(root))
    assert code == 0
    assert len((root / "s1.jsonl").read_bytes().splitlines()) == 2


def test_rewind_out_of_range(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "sessions", "rewind", "s1", "5", "--yes", "--root", str(root))
    assert code == 1 and "has 4 messages" in err


def test_delete_removes_every_file(root: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "s1.context.json").write_text("{}")
    (root / "s1.jsonl.corrupt").write_text("torn\n")
    code, _, err = run(capsys, "sessions", "delete", "s1", "--root", str(root))
    assert code == 1 and "not a terminal" in err and (root / "s1.jsonl").exists()
    monkeypatch.setattr(sys, "stdin", Tty("yes\n"))
    code, out, _ = run(capsys, "sessions", "delete", "s1", "--root", str(root))
    assert code == 0 and "deleted s1" in out and "s1.jsonl.corrupt" in out
    assert files_of(root, "s1") == []
    assert "s2.jsonl" in files_of(root, "s2")


def test_delete_with_yes(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(capsys, "sessions", "delete", "s2", "--yes", "--root", str(root))
    assert code == 0 and files_of(root, "s2") == []


@pytest.mark.parametrize("command", [
    ["show", "nope"], ["fork", "nope", "x"], ["rewind", "nope", "0", "--yes"],
    ["delete", "nope", "--yes"]])
def test_unknown_session(root: Path, capsys: pytest.CaptureFixture[str],
                         command: list[str]) -> None:
    code, out, err = run(capsys, "sessions", *command, "--root", str(root))
    assert code == 1 and out == ""
    assert "'nope' not found" in err and "sessions list" in err


@pytest.mark.parametrize("bad", ["../s1", "a/b", ".hidden", "x\ny", "", "a" * 200])
def test_hostile_ids(root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                     bad: str) -> None:
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for command in (["show", bad], ["fork", "s1", bad], ["delete", bad, "--yes"],
                    ["rewind", bad, "0", "--yes"]):
        code, _, err = run(capsys, "sessions", *command, "--root", str(root))
        assert code == 1, command
        assert err.startswith("ctxfold: error: ") and "session" in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_read_only_commands_never_repair_or_write(tmp_path: Path, capsys) -> None:
    """sessions list/show and tool-result used to move a torn tail to .corrupt."""
    import ctxfold
    from ctxfold.cli.main import main

    cm = ctxfold.open_session("torn", store_path=str(tmp_path), summarize=lambda r: "x")
    cm.append({"role": "user", "content": "hi"})
    with (tmp_path / "torn.jsonl").open("a") as f:
        f.write('{"role":"assistant","cont')  # a crash mid-line
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    for argv in (["sessions", "list"], ["sessions", "list", "--json"],
                 ["sessions", "show", "torn"], ["tool-result", "torn", "c1"]):
        main([*argv, "--root", str(tmp_path)])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert "torn" in capsys.readouterr().out


def test_one_damaged_session_does_not_hide_the_others(tmp_path: Path, capsys) -> None:
    import ctxfold
    from ctxfold.cli.main import main

    for sid in ("good", "bad"):
        ctxfold.open_session(sid, store_path=str(tmp_path), summarize=lambda r: "x").append(
            {"role": "user", "content": sid})
    (tmp_path / "bad.jsonl").write_text('not json\n{"role":"user","content":"x"}\n')
    assert main(["sessions", "list", "--root", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert "good" in out and "session 'bad'" in err
