"""Each importer on the small synthetic fixtures in tests/fixtures/importers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ctxfold import ImportedSession, ImporterOptions, Registry, Usage, import_session
from ctxfold.importing import detect_format

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "importers"
CONV = FIXTURES / "openhands_v1" / "conv0001"

DETECTION = {
    "openai_list.json": "openai",
    "openai_object.json": "openai",
    "openai.jsonl": "openai",
    "mini_v1.traj.json": "mini-swe-agent-v1",
    "mini_v2.traj.json": "mini-swe-agent-v2",
    "swe_agent.traj": "swe-agent",
    "openhands_sdk_log.json": "openhands-sdk-log",
    "claude_code.jsonl": "claude-code-jsonl",
    "claude_code.xml": "claude-code-xml",
    "openhands_v1/conv0001": "openhands-v1",
    "openhands_v1/conv0001/event_service": "openhands-v1",
    "openhands_v1/conv0001/event_service/events": "openhands-v1",
}


@pytest.fixture()
def registry() -> Registry:
    return Registry.from_config(load_entry_points=False)


def _load(registry: Registry, name: str, **kwargs: object) -> ImportedSession:
    return import_session(FIXTURES / name, registry, **kwargs)  # type: ignore[arg-type]


def _wire(session: ImportedSession) -> list[tuple[str, str, str | None, tuple[str, ...]]]:
    return [
        (m.role, m.content, m.tool_call_id, tuple(c.id for c in m.tool_calls))
        for m in session.messages
    ]


@pytest.mark.parametrize(("name", "fmt"), sorted(DETECTION.items()))
def test_auto_detection(name: str, fmt: str, registry: Registry) -> None:
    assert detect_format(FIXTURES / name, registry) == fmt
    assert import_session(FIXTURES / name, registry).format == fmt


@pytest.mark.parametrize("name", ["openai_list.json", "openai_object.json", "openai.jsonl"])
def test_openai_shapes(name: str, registry: Registry) -> None:
    session = _load(registry, name)
    assert _wire(session) == [
        ("system", "You are terse.", None, ()),
        ("user", "List files.", None, ()),
        ("assistant", "", None, ("c1",)),
        ("tool", "a.py\nb.py", "c1", ()),
        ("assistant", "Two files: a.py, b.py.", None, ()),
    ]
    assert session.reported_usage[2] == Usage(
        prompt_tokens=120, completion_tokens=9, cache_hit_tokens=100, cache_miss_tokens=20
    )
    if name == "openai_object.json":
        assert [t.name for t in session.tools] == ["ls"]
        assert session.tools[0].parameters["properties"] == {"path": {"type": "string"}}
        assert session.model == "gpt-test"


def test_openai_reads_ctxfold_transcript_lines(tmp_path: Path, registry: Registry) -> None:
    from ctxfold import Message, ToolCall
    from ctxfold.kernel.codec import dumps_message

    messages = [
        Message(role="user", content="hi"),
        Message(role="assistant", tool_calls=(ToolCall(id="k", name="ls", arguments="{}"),)),
        Message(role="tool", content="x", raw_content="xx", tool_call_id="k"),
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(dumps_message(m) + "\n" for m in messages))
    assert import_session(path, registry).messages == tuple(messages)


def test_mini_swe_agent_v1_synthesises_calls(registry: Registry) -> None:
    session = _load(registry, "mini_v1.traj.json")
    assert session.name == "demo__demo-1" and session.model == "test/gemini"
    assert [(m.role, m.tool_call_id, tuple(c.id for c in m.tool_calls))
            for m in session.messages] == [
        ("system", None, ()),
        ("user", None, ()),
        ("assistant", None, ("call_0001",)),
        ("tool", "call_0001", ()),
        ("assistant", None, ()),  # two bash blocks: no call
        ("user", None, ()),  # format-error feedback stays user
        ("assistant", None, ("call_0002",)),
        ("tool", "call_0002", ()),  # the submission diff answers the submit command
    ]
    call = session.messages[2].tool_calls[0]
    assert call.name == "bash" and json.loads(call.arguments) == {"command": "ls -la"}
    assert session.messages[2].content.startswith("THOUGHT: look.")  # full text kept
    assert session.reported_usage[4] == Usage(
        prompt_tokens=150, completion_tokens=20, cache_hit_tokens=100, cache_miss_tokens=50,
        reasoning_tokens=3,
    )


def test_mini_swe_agent_v2_exit_and_usage(registry: Registry) -> None:
    session = _load(registry, "mini_v2.traj.json")
    assert session.messages[2].reasoning_content == "Look around first."
    assert session.reported_usage[2] == Usage(
        prompt_tokens=3399, completion_tokens=251, cache_hit_tokens=3392, cache_miss_tokens=7,
        reasoning_tokens=5,
    )
    last = session.messages[-1]
    assert (last.role, last.tool_call_id) == ("tool", "call_00_b")
    assert last.content.startswith("diff --git")
    dropped = _load(registry, "mini_v2.traj.json", options=ImporterOptions(exit_message="drop"))
    assert len(dropped.messages) == len(session.messages) - 1
    assert dropped.messages[-1].tool_calls[0].id == "call_00_b"


def test_swe_agent_uses_history_only(registry: Registry) -> None:
    session = _load(registry, "swe_agent.traj")
    assert [m.role for m in session.messages] == [
        "system", "user", "assistant", "tool", "assistant", "tool"
    ]
    assert session.messages[3].tool_call_id == "call_abc"
    assert all("repeated" not in m.content for m in session.messages)
    assert session.reported_usage == (None,) * 6


def test_openhands_sdk_log(registry: Registry) -> None:
    session = _load(registry, "openhands_sdk_log.json")
    assert [t.name for t in session.tools] == ["terminal", "finish"]
    assert session.messages[0].content == "You are OpenHands agent."
    assert session.messages[3].name == "terminal"
    final = session.messages[-1]
    assert final.role == "assistant" and final.tool_calls[0].name == "finish"
    assert session.reported_usage[-1] is not None
    assert session.reported_usage[-1].prompt_tokens == 6729
    assert session.model == "litellm_proxy/claude-test"


@pytest.mark.parametrize("sub", ["", "event_service", "event_service/events"])
def test_openhands_v1_events(sub: str, registry: Registry) -> None:
    session = import_session(CONV / sub if sub else CONV, registry)
    assert session.name == "conv0001"
    assert [t.name for t in session.tools] == ["execute_bash", "finish"]
    assert _wire(session) == [
        ("system", "You are OpenHands agent.", None, ()),
        ("user", "Fix the bug.", None, ()),
        ("assistant", "Run two commands.", None, ("toolu_a", "toolu_b")),  # one llm response
        ("tool", "file.py", "toolu_a", ()),
        ("tool", "No replacement was performed", "toolu_b", ()),
        ("assistant", "Done.", None, ("toolu_c",)),
        ("tool", "ok", "toolu_c", ()),
    ]
    assert all("SNAPSHOT" not in m.content for m in session.messages)
    assert session.reported_usage[2] == Usage(
        prompt_tokens=900, completion_tokens=50, cache_hit_tokens=800, cache_miss_tokens=100
    )
    assert session.model == "litellm_proxy/claude-test"


def test_openhands_v1_orders_by_sequence_number(tmp_path: Path, registry: Registry) -> None:
    events = tmp_path / "c" / "event_service" / "events"
    shutil.copytree(CONV / "event_service" / "events", events)
    # Renumber one event to 00010: it must now come last (numeric, not name, order).
    src = next(events.glob("event-00001-*.json"))
    src.rename(events / "event-00010-e1.json")
    session = import_session(tmp_path / "c", registry)
    assert session.messages[-1].role == "user"


def test_claude_code_jsonl(registry: Registry) -> None:
    session = _load(registry, "claude_code.jsonl")
    assert session.name == "11111111-2222-3333-4444-555555555555"
    assert session.model == "claude-test-4"
    assert _wire(session) == [
        ("user", "List the files please.", None, ()),
        ("assistant", "Listing now.", None, ("toolu_01",)),  # 3 records of req_1 merged
        ("tool", "a.py\nb.py", "toolu_01", ()),  # duplicate uuid u2 skipped
        ("assistant", "", None, ("toolu_02",)),  # sidechain record skipped
        ("tool", "print('hi')", "toolu_02", ()),
        ("user", "[Request interrupted by user for tool use]", None, ()),
        ("user", "Now run it.", None, ()),
        ("assistant", "", None, ("toolu_03",)),  # unanswered trailing call
    ]
    merged = session.messages[1]
    assert merged.reasoning_content == "User wants a listing."
    assert json.loads(merged.tool_calls[0].arguments) == {
        "command": "ls", "description": "List files"
    }
    assert session.reported_usage[1] == Usage(
        prompt_tokens=6009, completion_tokens=42, cache_hit_tokens=5000, cache_miss_tokens=1009
    )
    assert session.reported_usage[-1] is not None
    assert session.reported_usage[-1].completion_tokens == 7


def test_claude_code_xml(registry: Registry) -> None:
    session = _load(registry, "claude_code.xml")
    assert session.name == "99999999-aaaa-bbbb-cccc-dddddddddddd"
    assert session.model == "claude-test-4"
    assert _wire(session) == [
        ("user", "Find the config & print it.", None, ()),
        ("assistant", "Searching.", None, ("toolu_X1",)),
        ("tool", "[agent]\ncompact_ratio = 0.8 <ok>", "toolu_X1", ()),
        ("assistant", "The ratio is 0.8.", None, ()),
        ("user", "Export this session.", None, ()),
        ("assistant", "", None, ("toolu_X2",)),
    ]
    assert session.messages[1].reasoning_content == "The user wants the config."
    assert json.loads(session.messages[1].tool_calls[0].arguments) == {
        "command": "cat config.toml"
    }
    # Usage of the last record of the merged group; prompt = input + cache writes + reads.
    assert session.reported_usage[1] == Usage(
        prompt_tokens=1004, completion_tokens=30, cache_hit_tokens=0, cache_miss_tokens=1004
    )


def test_fmt_override(tmp_path: Path, registry: Registry) -> None:
    # The SDK log is an object with "messages": the generic importer reads only those.
    generic = _load(registry, "openhands_sdk_log.json", fmt="openai")
    assert generic.format == "openai" and len(generic.messages) == 4
    assert [t.name for t in generic.tools] == ["terminal", "finish"]
    # Without its format tag, detection falls back to the generic importer; fmt= wins.
    doc = json.loads((FIXTURES / "mini_v1.traj.json").read_text())
    del doc["trajectory_format"]
    path = tmp_path / "untagged.json"
    path.write_text(json.dumps(doc))
    assert detect_format(path, registry) == "openai"
    forced = import_session(path, registry, fmt="mini-swe-agent-v1")
    assert forced.format == "mini-swe-agent-v1"
    assert forced.messages[3].tool_call_id == "call_0001"
