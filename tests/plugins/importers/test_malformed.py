"""Malformed input fails with an ImporterError naming the file, the position and the reason."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ctxfold import CtxfoldError, ImporterError, Registry, import_session

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "importers"


@pytest.fixture()
def registry() -> Registry:
    return Registry.from_config(load_entry_points=False)


def _fails(path: Path, registry: Registry, fmt: str | None, *fragments: str) -> str:
    with pytest.raises(ImporterError) as info:
        import_session(path, registry, fmt)
    message = str(info.value)
    assert isinstance(info.value, CtxfoldError)
    for fragment in (str(path), *fragments):
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def _json_fixture(tmp_path: Path, name: str) -> tuple[Path, dict[str, Any]]:
    target = tmp_path / name
    return target, json.loads((FIXTURES / name).read_text())


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("openai_object.json", "openai"),
        ("mini_v1.traj.json", "mini-swe-agent-v1"),
        ("mini_v2.traj.json", "mini-swe-agent-v2"),
        ("swe_agent.traj", "swe-agent"),
        ("openhands_sdk_log.json", "openhands-sdk-log"),
    ],
)
def test_truncated_json(name: str, fmt: str, tmp_path: Path, registry: Registry) -> None:
    text = (FIXTURES / name).read_text()
    path = tmp_path / name
    path.write_text(text[: len(text) // 2])
    _fails(path, registry, fmt, "line ", "column ", "invalid JSON")


def test_bad_jsonl_line(tmp_path: Path, registry: Registry) -> None:
    lines = (FIXTURES / "claude_code.jsonl").read_text().splitlines()
    lines[3] = lines[3][:40]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    _fails(path, registry, "claude-code-jsonl", "line 4", "invalid JSON line")
    openai_lines = (FIXTURES / "openai.jsonl").read_text().splitlines()
    openai_lines[2] = "{not json"
    path = tmp_path / "o.jsonl"
    path.write_text("\n".join(openai_lines) + "\n")
    _fails(path, registry, "openai", "line 3", "invalid JSON line")


def test_tool_result_without_call_openai(tmp_path: Path, registry: Registry) -> None:
    path, doc = _json_fixture(tmp_path, "openai_object.json")
    doc["messages"][3]["tool_call_id"] = "nope"
    path.write_text(json.dumps(doc))
    _fails(path, registry, None, "messages[3]", "'nope'", "no earlier assistant message")


def test_tool_result_before_call_mini_v2(tmp_path: Path, registry: Registry) -> None:
    path, doc = _json_fixture(tmp_path, "mini_v2.traj.json")
    doc["messages"][2], doc["messages"][3] = doc["messages"][3], doc["messages"][2]
    path.write_text(json.dumps(doc))
    _fails(path, registry, None, "messages[2]", "'call_00_a'", "no earlier assistant")


def test_missing_required_fields(tmp_path: Path, registry: Registry) -> None:
    path, doc = _json_fixture(tmp_path, "mini_v1.traj.json")
    del doc["messages"][3]["content"]
    path.write_text(json.dumps(doc))
    _fails(path, registry, None, "messages[3]", "missing required field 'content'")

    path, doc = _json_fixture(tmp_path, "swe_agent.traj")
    del doc["history"]
    path.write_text(json.dumps(doc))
    _fails(path, registry, "swe-agent", "top level", "missing required field 'history'")

    path, doc = _json_fixture(tmp_path, "swe_agent.traj")
    del doc["history"][3]["tool_call_ids"]
    path.write_text(json.dumps(doc))
    _fails(path, registry, None, "history[3]", "tool_call_ids")

    path, doc = _json_fixture(tmp_path, "openhands_sdk_log.json")
    doc["response"]["choices"] = []
    path.write_text(json.dumps(doc))
    _fails(path, registry, None, "response.choices", "no response message")


def test_unknown_role(tmp_path: Path, registry: Registry) -> None:
    path, doc = _json_fixture(tmp_path, "mini_v1.traj.json")
    doc["messages"][1]["role"] = "robot"
    path.write_text(json.dumps(doc))
    _fails(path, registry, None, "messages[1]", "unknown role 'robot'")
    # The generic importer does not know mini-swe-agent's "exit" role.
    _fails(FIXTURES / "mini_v2.traj.json", registry, "openai", "messages[5]", "'exit'")


def test_openhands_v1_bad_event_file(tmp_path: Path, registry: Registry) -> None:
    conv = tmp_path / "conv"
    shutil.copytree(FIXTURES / "openhands_v1" / "conv0001", conv)
    events = conv / "event_service" / "events"
    bad = next(events.glob("event-00004-*.json"))
    bad.write_text('{"kind": "ObservationEvent", ')
    _fails(conv, registry, None, bad.name, "invalid JSON")

    bad.write_text(json.dumps({"kind": "ObservationEvent", "tool_call_id": "toolu_zzz",
                               "observation": {"kind": "X", "output": "?"}}))
    _fails(conv, registry, None, f"event file {bad.name}", "'toolu_zzz'")

    bad.write_text(json.dumps({"id": "no-kind"}))
    _fails(conv, registry, None, bad.name, "missing required field 'kind'")


def test_openhands_v1_empty_directory(tmp_path: Path, registry: Registry) -> None:
    _fails(tmp_path, registry, "openhands-v1", "no event-NNNNN-*.json files")


def test_claude_jsonl_tool_result_without_call(tmp_path: Path, registry: Registry) -> None:
    lines = (FIXTURES / "claude_code.jsonl").read_text().splitlines()
    record = json.loads(lines[5])
    record["message"]["content"][0]["tool_use_id"] = "toolu_ghost"
    lines[5] = json.dumps(record)
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    _fails(path, registry, None, "line 6", "'toolu_ghost'")

    del record["message"]
    lines[5] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    _fails(path, registry, None, "line 6", "missing required field 'message'")


def test_claude_xml_errors(tmp_path: Path, registry: Registry) -> None:
    text = (FIXTURES / "claude_code.xml").read_text()
    path = tmp_path / "c.xml"
    path.write_text(text[: len(text) // 2])
    _fails(path, registry, None, "line ", "column ", "invalid XML")

    path.write_text(text.replace('tool-use-id="toolu_X1"', 'tool-use-id="toolu_ghost"'))
    _fails(path, registry, None, "<message> #5", "uuid u2", "'toolu_ghost'")

    path.write_text(text.replace('{"command": "python3 export.py"}', "{not json"))
    _fails(path, registry, None, "<message> #8", "toolu_X2", "<input> is not JSON")
