"""Every importer on every real session under ../shared/data/transcripts (skips when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxfold import ImportedSession, ImporterOptions, Registry, import_session
from ctxfold.importing import detect_format

REPO_ROOT = Path(__file__).resolve().parents[3]
DATA = REPO_ROOT.parent / "shared" / "data" / "transcripts"

FOLDERS = {
    "mini_swe_agent_v1_gemini3pro": "mini-swe-agent-v1",
    "mini_swe_agent_v2_toolcall": "mini-swe-agent-v2",
    "swe_agent_function_calling": "swe-agent",
    "openhands_v1_events": "openhands-v1",
    "openhands_sdk_llm_log": "openhands-sdk-log",
    "claude_code_cctrace_xml": "claude-code-xml",
}
#: Formats that record provider usage on every assistant message.
USAGE_ON_EVERY_ASSISTANT = {"mini-swe-agent-v1", "mini-swe-agent-v2", "claude-code-xml"}

#: Expected figures from the per-folder READMEs:
#: (system, user, assistant, tool, tool calls, largest tool output bytes, max prompt tokens).
EXPECTED = {
    "django__django-16255.traj.json": (1, 1, 17, 17, 17, 1335, 5053),
    "scikit-learn__scikit-learn-25102.traj.json": (1, 3, 43, 41, 41, 10613, 106497),
    "psf__requests-1142.traj.json": (1, 3, 71, 69, 69, 868176, 38122),
    "pylint-dev__pylint-6528.traj.json": (1, 3, 97, 95, 95, 41623, 95507),
    "deepseek_chat_dev_rerun__pylint-dev__astroid-1333.traj.json":
        (1, 1, 188, 187, 188, 4981, 101667),
    "deepseek_reasoner_dev__sqlfluff__sqlfluff-1763.traj.json":
        (1, 1, 103, 102, 103, 10613, 50531),
    "deepseek_chat_test_1-100__django__django-14752.traj.json":
        (1, 1, 31, 30, 31, 3933, 15811),
    "marshmallow-code__marshmallow-1867__function_calling_replace_from_source.traj":
        (1, 1, 13, 13, 13, 6277, 0),
    "litellm_proxy__anthropic__claude-sonnet-4-20250514-1757015046.707.json":
        (1, 1, 6, 5, 6, 1958, 6729),
    "conversation_full.xml": (0, 9, 144, 132, 133, 29113, 128630),
    "40c95fc35bde4128a8802e7a40419901": (1, 1, 116, 116, 116, 167373, 50630),
    "0535c419f44a4e248c72e40c77a06a32": (1, 1, 167, 167, 167, 11453, 51075),
    "4e1a4136853042d489f9f0708bbc87f8": (1, 1, 69, 69, 69, 56912, 66612),
    "b2688296b4844863aaede6f60a88b9da": (1, 1, 20, 20, 20, 12202, 0),
}


def _sessions() -> list[tuple[Path, str]]:
    if not DATA.is_dir():
        return []
    found = []
    for folder, fmt in FOLDERS.items():
        base = DATA / folder
        if not base.is_dir():
            continue
        for entry in sorted(base.iterdir()):
            is_conversation = fmt == "openhands-v1" and entry.is_dir()
            if is_conversation or (entry.is_file() and entry.name != "README.md"):
                found.append((entry, fmt))
    return found


SESSIONS = _sessions()
pytestmark = pytest.mark.skipif(not SESSIONS, reason=f"real transcripts not found at {DATA}")


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry.from_config(load_entry_points=False)


def _ids(item: tuple[Path, str]) -> str:
    return item[0].name


@pytest.mark.parametrize("item", SESSIONS, ids=_ids)
def test_detects_format(item: tuple[Path, str], registry: Registry) -> None:
    path, fmt = item
    assert detect_format(path, registry) == fmt
    if fmt == "openhands-v1":
        assert detect_format(path / "event_service", registry) == fmt
        assert detect_format(path / "event_service" / "events", registry) == fmt


def _check_structure(session: ImportedSession) -> None:
    assert len(session.messages) >= 10
    assert len(session.reported_usage) == len(session.messages)
    requested: list[str] = []
    answered: set[str] = set()
    for message in session.messages:
        assert message.role in ("system", "user", "assistant", "tool")
        if message.role == "assistant":
            assert message.content or message.tool_calls or message.reasoning_content
            for call in message.tool_calls:
                assert call.id and call.name
                requested.append(call.id)
        elif message.role == "tool":
            assert message.tool_call_id in requested, "tool result before its call"
            answered.add(message.tool_call_id)
        else:
            assert message.content.strip()
    unanswered = [cid for cid in requested if cid not in answered]
    # Per the README the only unanswered call is the session's last one (submit/finish/export).
    assert unanswered in ([], requested[-1:])
    first_user = next(m for m in session.messages if m.role == "user")
    assert len(first_user.content) > 20


@pytest.mark.parametrize("item", SESSIONS, ids=_ids)
def test_imports_real_session(item: tuple[Path, str], registry: Registry) -> None:
    path, fmt = item
    session = import_session(path, registry, options=ImporterOptions(exit_message="drop"))
    assert session.format == fmt
    assert session.source == path
    _check_structure(session)
    assistants = [i for i, m in enumerate(session.messages) if m.role == "assistant"]
    usage = [session.reported_usage[i] for i in assistants]
    if fmt in USAGE_ON_EVERY_ASSISTANT:
        assert all(u is not None and u.prompt_tokens > 0 for u in usage)
    if fmt == "openhands-sdk-log":
        last = session.reported_usage[-1]
        assert last is not None and last.prompt_tokens > 0
        assert session.tools
    if fmt == "openhands-v1":
        assert session.messages[0].role == "system" and session.tools
    non_assistant_usage = [
        u for m, u in zip(session.messages, session.reported_usage, strict=True)
        if m.role != "assistant"
    ]
    assert all(u is None for u in non_assistant_usage)

    expected = EXPECTED.get(path.name)
    if expected is None:
        return
    system, user, assistant, tool, calls, largest, max_prompt = expected
    roles = [m.role for m in session.messages]
    assert (roles.count("system"), roles.count("user"), roles.count("assistant"),
            roles.count("tool")) == (system, user, assistant, tool)
    assert sum(len(m.tool_calls) for m in session.messages) == calls
    tool_bytes = [len(m.content.encode()) for m in session.messages if m.role == "tool"]
    # OpenHands: equal to README only if old_content/new_content snapshots were ignored.
    assert max(tool_bytes) == largest
    prompts = [u.prompt_tokens for u in session.reported_usage if u is not None]
    assert max(prompts, default=0) == max_prompt


def test_mini_swe_agent_v2_cache_split_and_reasoning(registry: Registry) -> None:
    path = DATA / "mini_swe_agent_v2_toolcall" / (
        "deepseek_reasoner_dev__sqlfluff__sqlfluff-1763.traj.json"
    )
    if not path.is_file():
        pytest.skip(f"{path} not present")
    session = import_session(path, registry)
    usage = [u for u in session.reported_usage if u is not None]
    assert all(u.cache_hit_tokens + u.cache_miss_tokens == u.prompt_tokens for u in usage)
    assert any(u.cache_hit_tokens > 0 for u in usage)
    assert any(m.reasoning_content for m in session.messages if m.role == "assistant")
    # Default exit handling: the submission answers the last bash call.
    last = session.messages[-1]
    assert last.role == "tool" and last.content.startswith("diff --git")
    assert last.tool_call_id == session.messages[-2].tool_calls[-1].id


def test_claude_xml_merges_records_and_keeps_thinking(registry: Registry) -> None:
    path = DATA / "claude_code_cctrace_xml" / "conversation_full.xml"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    session = import_session(path, registry)
    assert session.name == "f33cdb42-0a41-40d4-91eb-c89c109af38a"
    assert sum(1 for m in session.messages if m.reasoning_content) > 0
    interrupted = [m for m in session.messages if "[Request interrupted by user" in m.content]
    assert len(interrupted) == 2 and all(m.role == "user" for m in interrupted)
    assert session.messages[-1].tool_calls[-1].name == "Bash"
