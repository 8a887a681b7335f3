"""``ctxfold estimate``: file formats, JSON shape, --per-request, errors."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from ctxfold import Config, Registry
from ctxfold.cli import common, estimate_cmd
from ctxfold.cli.main import COMMAND_MODULES

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "List files."},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "a.py\nb.py"},
    {"role": "assistant", "content": "Two files."},
]
TOOLS: list[dict[str, Any]] = [
    {"type": "function",
     "function": {"name": "bash", "description": "run", "parameters": {"type": "object"}}},
]


@attrs.frozen
class _Loaded:
    config: Config


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Default config and built-ins only: no project files, no third-party plugins."""
    monkeypatch.setattr(common, "load_cli_config", lambda _args: _Loaded(Config()))
    monkeypatch.setattr(
        common, "load_registry",
        lambda _args: Registry.from_config(load_entry_points=False),
    )


def run(argv: list[str], capsys: pytest.CaptureFixture[str], code: int = 0) -> str:
    parser = argparse.ArgumentParser(prog="ctxfold")
    estimate_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    assert args.func(args) == code
    return capsys.readouterr().out


def heuristic_total(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> int:
    from ctxfold import RequestShape, message_from_openai
    from ctxfold.interop.chat import tool_schema_from_openai
    from ctxfold.plugins.estimators.heuristic import HeuristicEstimator

    shape = RequestShape(messages=[message_from_openai(m) for m in messages],
                         tools=[tool_schema_from_openai(t) for t in tools or ()])
    return HeuristicEstimator().estimate(shape)


def test_registered_in_main() -> None:
    assert "ctxfold.cli.estimate_cmd" in COMMAND_MODULES


def test_json_shape_and_per_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(MESSAGES), encoding="utf-8")
    out = json.loads(run(["estimate", str(path), "--estimator", "heuristic", "--json",
                          "--per-request"], capsys))
    assert list(out["sessions"][0]) == ["name", "format", "tokens", "requests"]
    assert out["sessions"][0]["format"] == "openai" and out["errors"] == []
    session = out["sessions"][0]
    assert session["name"] == str(path)
    assert session["tokens"] == heuristic_total(MESSAGES)
    assert [r["index"] for r in session["requests"]] == [2, 4]
    assert session["requests"][0]["tokens"] == heuristic_total(MESSAGES[:2])
    assert session["requests"][1]["tokens"] == heuristic_total(MESSAGES[:4])


def test_object_with_tools_and_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    obj = tmp_path / "o.json"
    obj.write_text(json.dumps({"messages": MESSAGES, "tools": TOOLS}), encoding="utf-8")
    lines = tmp_path / "l.jsonl"
    lines.write_text("\n".join(json.dumps(m) for m in MESSAGES) + "\n", encoding="utf-8")
    out = json.loads(run(["estimate", str(obj), str(lines), "--estimator", "heuristic",
                          "--json"], capsys))
    tokens = {s["name"]: s["tokens"] for s in out["sessions"]}
    assert tokens[str(obj)] == heuristic_total(MESSAGES, TOOLS)
    assert tokens[str(lines)] == heuristic_total(MESSAGES)
    assert tokens[str(obj)] > tokens[str(lines)]
    assert all(s["requests"] == [] for s in out["sessions"])


def test_default_estimator_comes_from_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(MESSAGES), encoding="utf-8")
    out = json.loads(run(["estimate", str(path), "--json"], capsys))
    assert out["estimator"] == Config().estimator.name


def test_text_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(MESSAGES), encoding="utf-8")
    out = run(["estimate", str(path), "--estimator", "heuristic", "--per-request"], capsys)
    assert str(path) in out
    assert "request before message 4" in out


@pytest.mark.parametrize(
    ("name", "body", "where"),
    [
        ("bad.json", '[{"role": "user", "content": "a"},\n  {"role": ', "line 2"),
        ("bad.jsonl", '{"role": "user", "content": "a"}\n{"role": oops}\n', "line 2"),
        (
            "role.json",
            '[{"role": "user"}, {"role": "wizard", "content": "x"}]',
            "[1]: role: unknown role",
        ),
        ("scalar.json", "42", "unknown transcript format"),
    ],
)
def test_malformed_files_name_file_and_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, body: str, where: str
) -> None:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(MESSAGES), encoding="utf-8")
    # The bad file is reported and skipped; the good one is still estimated; exit 1.
    out = run(["estimate", str(path), str(good), "--estimator", "heuristic"], capsys, code=1)
    assert str(good) in out and str(path) not in out
    out = json.loads(run(["estimate", str(path), "--estimator", "heuristic", "--json"], capsys,
                         code=1))
    [error] = out["errors"]
    assert error["path"] == str(path) and where in error["error"]


def test_read_session_is_the_reading_seam(tmp_path: Path) -> None:
    from ctxfold import Registry

    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in MESSAGES), encoding="utf-8")
    messages, _ = estimate_cmd.read_session(path, Registry.from_config(load_entry_points=False))
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[2].tool_calls[0].name == "bash"


def test_other_importer_formats_are_read(capsys: pytest.CaptureFixture[str]) -> None:
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "importers"
    files = sorted(p for p in fixture.iterdir() if p.is_file() and "malformed" not in p.name
                   and "bad" not in p.name)
    assert files, "importer fixtures exist"
    out = json.loads(run(["estimate", str(files[0]), "--estimator", "heuristic", "--json"],
                         capsys))
    assert out["sessions"][0]["tokens"] > 0


def test_tools_file_is_counted_when_the_session_records_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in MESSAGES), encoding="utf-8")
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS), encoding="utf-8")
    plain = json.loads(run(["estimate", str(path), "--estimator", "heuristic", "--json"],
                           capsys))
    with_tools = json.loads(run(["estimate", str(path), "--estimator", "heuristic", "--json",
                                 "--tools", str(tools)], capsys))
    assert with_tools["sessions"][0]["tokens"] > plain["sessions"][0]["tokens"]


def test_per_request_shows_what_the_provider_reported(capsys: pytest.CaptureFixture[str]) -> None:
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "importers" / "mini_v2.traj.json"
    out = json.loads(run(["estimate", str(fixture), "--estimator", "heuristic", "--json",
                          "--per-request"], capsys))
    [session] = out["sessions"]
    assert session["format"] == "mini-swe-agent-v2"
    reported = [r["reported"] for r in session["requests"]]
    assert any(isinstance(r, int) and r > 0 for r in reported)
    text = run(["estimate", str(fixture), "--estimator", "heuristic", "--per-request"], capsys)
    assert "(mini-swe-agent-v2)" in text and "provider reported" in text
