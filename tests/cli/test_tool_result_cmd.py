"""``ctxfold tool-result SESSION CALL_ID`` prints exactly one page (design §3.2)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ctxfold import Message
from ctxfold.capabilities.bounding import make_tool_result, result_ref
from ctxfold.cli.main import main

TEXT = "".join(f"{i:05d} résumé 日本語 😀\n" for i in range(3000))


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A session directory with session ``s1`` holding one bounded and one small result."""
    from ctxfold.plugins.stores.fs import FsStore

    monkeypatch.chdir(tmp_path)  # no ./ctxfold.toml of the developer's checkout applies
    directory = tmp_path / "sessions"
    store = FsStore(directory)
    store.create("s1")
    store.append("s1", [
        Message(role="user", content="run it"),
        make_tool_result("c1", TEXT, tool_name="bash"),
        make_tool_result("c2", "short", tool_name="ls"),
    ])
    return directory


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_prints_one_page_exactly(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ref = result_ref("c1", TEXT)
    code, out, err = run(capsys, "tool-result", "s1", "c1", "--root", str(root),
                         "--result-ref", ref, "--offset", "0", "--limit", "1000")
    assert (code, err) == (0, "")
    header_line, page = out.split("\n", 1)
    header = json.loads(header_line)
    assert header == {
        "result_ref": ref,
        "offset": 0,
        "next_offset": len(page.encode()),
        "total_bytes": len(TEXT.encode()),
        "sha256": hashlib.sha256(TEXT.encode()).hexdigest(),
        "complete": False,
    }
    assert 997 <= len(page.encode()) <= 1000
    assert TEXT.startswith(page)


def test_pages_chain_to_full_text(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ref = result_ref("c1", TEXT)
    offset, pieces = 0, []
    while True:
        code, out, _ = run(capsys, "tool-result", "s1", "c1", "--root", str(root),
                           "--result-ref", ref, "--offset", str(offset))
        assert code == 0
        header_line, page = out.split("\n", 1)
        header = json.loads(header_line)
        pieces.append(page)
        if header["complete"]:
            break
        offset = header["next_offset"]
    assert "".join(pieces) == TEXT


def test_the_only_result_of_a_call_needs_no_ref(root: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "tool-result", "s1", "c1", "--root", str(root))
    assert (code, err) == (0, "")
    header = json.loads(out.split("\n", 1)[0])
    assert header["result_ref"] == result_ref("c1", TEXT) and header["offset"] == 0


def test_small_result_needs_no_ref(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "tool-result", "s1", "c2", "--root", str(root))
    assert code == 0
    assert out.endswith("\nshort")
    assert json.loads(out.split("\n", 1)[0])["complete"] is True


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["s1", "zz"], "no tool result with tool_call_id='zz'"),
        (["s1", "c2", "--offset", "99"], "offset=99 is outside"),
        (["nope", "c1"], "session 'nope' not found"),
    ],
)
def test_errors_go_to_stderr_with_exit_1(
    root: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    code, out, err = run(capsys, "tool-result", *argv, "--root", str(root))
    assert code == 1
    assert out == ""
    assert err.startswith("ctxfold: error: ")
    assert expected in err
