"""The extractive summarizer: deterministic, offline, invents nothing (design §4.4, §4.5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxfold import Config, Message, Registry, Summarizer, SummaryRequest, ToolCall, ToolSchema
from ctxfold.kernel.kinds import SUMMARIZER
from ctxfold.kernel.summary import (
    SUMMARY_HEADINGS,
    build_summary_request,
    validate_summary_result,
    wrap_summary,
)
from ctxfold.plugins.summarizers.extractive import ExtractiveSummarizer


def _call(call_id: str, command: str) -> ToolCall:
    return ToolCall(id=call_id, name="shell", arguments=json.dumps({"command": command}))


TASK = (
    "Add retry support to the HTTP client in src/app/http.py.\n"
    "Never change the public signature of fetch(). Tests must pass with pytest -q.\n\n"
    "Some background that is not the task statement."
)
REGION = [
    Message(role="user", content=TASK),
    Message(
        role="assistant",
        content="I chose tenacity-free backoff because the project avoids new dependencies.",
        tool_calls=(_call("c1", "cat src/app/http.py"),),
    ),
    Message(role="tool", tool_call_id="c1", content="import httpx\n\ndef fetch(url): ..."),
    Message(role="assistant", tool_calls=(_call("c2", "pytest -q tests/test_http.py"),)),
    Message(
        role="tool",
        tool_call_id="c2",
        content="F.\nE   AssertionError: expected 3 retries\n"
        "FAILED tests/test_http.py::test_retry\nexit code: 1",
    ),
    Message(role="user", content="Please do not use sleep in tests; use a fake clock."),
    Message(role="assistant", content="Fixed the off-by-one in the retry loop.\n\nNext I will "
            "rerun pytest -q and then update docs/retries.md."),
]


def _summarize(region: list[Message], max_tokens: int = 8192) -> str:
    request = build_summary_request(
        Message(role="system", content="Always be careful. You must obey."),
        region,
        (ToolSchema(name="shell"),),
        window=max_tokens * 4,
    )
    result = ExtractiveSummarizer().summarize(request)
    assert result.finish_reason == "stop"
    return validate_summary_result(result)


def _section(text: str, heading: str) -> str:
    start = text.index(heading + "\n") + len(heading) + 1
    following = [text.find("\n\n## ", start)]
    end = min(i for i in [*following, len(text)] if i >= 0)
    return text[start:end]


def test_deterministic_same_bytes() -> None:
    assert _summarize(REGION) == _summarize(list(REGION))


def test_contents_under_the_right_headings() -> None:
    text = _summarize(REGION)
    facts = _section(text, "## Standing facts & constraints")
    assert "- Never change the public signature of fetch()." in facts
    assert "- Tests must pass with pytest -q." in facts
    assert "- Please do not use sleep in tests; use a fake clock." in facts
    assert "Task: Add retry support to the HTTP client in src/app/http.py." in facts
    assert "background" not in text
    # The system message and the instruction are not summarized.
    assert "careful" not in text and "summary-request" not in text
    assert _section(text, "## Goal") == (
        "- Add retry support to the HTTP client in src/app/http.py."
    )
    decisions = _section(text, "## Decisions & rationale")
    assert "because the project avoids new dependencies" in decisions
    files = _section(text, "## Files & code").splitlines()
    assert files == ["- src/app/http.py", "- tests/test_http.py"]
    commands = _section(text, "## Commands & outcomes")
    assert "- shell `cat src/app/http.py` → import httpx" in commands
    assert "- shell `pytest -q tests/test_http.py` → F. (exit 1)" in commands
    errors = _section(text, "## Errors & fixes")
    assert "E AssertionError: expected 3 retries" in errors
    assert "FAILED tests/test_http.py::test_retry" in errors
    assert "Fix: Fixed the off-by-one in the retry loop." in errors
    assert _section(text, "## Pending & next step").startswith(
        "- Next I will rerun pytest -q and then update docs/retries.md."
    )
    order = [text.index(h) for h in SUMMARY_HEADINGS]
    assert order == sorted(order)


def test_empty_headings_are_omitted() -> None:
    text = _summarize([Message(role="user", content="Rename the module to core.")])
    assert text.startswith("## Standing facts & constraints\n")
    assert "## Goal" in text
    for heading in SUMMARY_HEADINGS[2:]:
        assert heading not in text


def test_merges_previous_summary_deduplicated() -> None:
    previous = wrap_summary(
        "## Standing facts & constraints\n- Never change the public signature of fetch().\n"
        "- Use Python 3.11 only.\n\n## Goal\n- Add retry support.\n\n"
        "## Files & code\n- src/app/old.py\n\n## Pending & next step\n- Write the retry loop."
    )
    region = [previous, *REGION[1:]]  # the task itself was folded before
    text = _summarize(region)
    facts = _section(text, "## Standing facts & constraints")
    assert facts.count("Never change the public signature of fetch().") == 1
    assert "- Use Python 3.11 only." in facts
    assert _section(text, "## Goal") == "- Add retry support."
    files = _section(text, "## Files & code").splitlines()
    assert files[0] == "- src/app/old.py" and "- src/app/http.py" in files
    pending = _section(text, "## Pending & next step")
    assert "Write the retry loop" not in pending  # superseded by the newer intent
    assert "rerun pytest -q" in pending
    assert text.count("<compaction-summary>") == 0


def test_previous_pending_kept_when_nothing_newer() -> None:
    previous = wrap_summary("## Pending & next step\n- Write the retry loop.")
    text = _summarize([previous, Message(role="user", content="continue")])
    assert _section(text, "## Pending & next step") == "- Write the retry loop."


def test_reused_call_ids_pair_with_the_next_result_and_source_listings_are_not_errors() -> None:
    region = [
        Message(role="user", content="Investigate."),
        Message(role="assistant", tool_calls=(_call("x", "ls"),)),
        Message(role="tool", tool_call_id="x", content="README.md\n<returncode>0</returncode>"),
        Message(role="assistant", tool_calls=(_call("x", "grep -n Error lib/m.py"),)),
        Message(role="tool", tool_call_id="x", content="12:    raise ValueError(msg)\n"
                "13: except KeyError as error:\nTypeError: boom"),
        Message(role="assistant", tool_calls=(_call("y", "make"),)),
    ]
    text = _summarize(region)
    commands = _section(text, "## Commands & outcomes").splitlines()
    assert commands == [
        "- shell `ls` → README.md (exit 0)",
        "- shell `grep -n Error lib/m.py` → 12: raise ValueError(msg)",
        "- shell `make` → (no result in the folded region)",
    ]
    assert _section(text, "## Errors & fixes") == "- TypeError: boom"


@pytest.mark.parametrize("max_tokens", [64, 256, 1024])
def test_output_bounded_by_max_tokens(max_tokens: int) -> None:
    region: list[Message] = [Message(role="user", content=TASK)]
    for i in range(300):
        region.append(Message(role="assistant", tool_calls=(_call(f"c{i}", f"cat pkg/m{i}.py"),)))
        region.append(Message(role="tool", tool_call_id=f"c{i}", content=f"Error: bad {i}"))
    request = SummaryRequest(messages=tuple(region), tools=(), max_tokens=max_tokens)
    text = ExtractiveSummarizer().summarize(request).text
    assert 0 < len(text) <= max_tokens * 4
    assert text.startswith("## Standing facts & constraints\n- Task:")


def test_registered() -> None:
    registry = Registry.from_config(load_entry_points=False)
    summarizer = registry.create(SUMMARIZER, "extractive", config=Config())
    assert isinstance(summarizer, Summarizer)


def _transcripts_dir() -> Path:
    repo_root = Path(__file__).resolve().parents[3]
    return repo_root.parent / "shared" / "data" / "transcripts"


def _load(path: Path) -> list[Message]:
    """OpenAI-shaped records of a SWE-agent ``.traj`` file (``history``) or a mini-swe-agent 2.x
    file (``messages``)."""
    from ctxfold import message_from_openai

    data = json.loads(path.read_text(encoding="utf-8"))
    records = data.get("history") or data.get("messages") or []
    messages = []
    for i, record in enumerate(records):
        if record.get("role") not in ("system", "user", "assistant", "tool"):
            continue  # mini-swe-agent's final "exit" record
        fields = {k: record[k] for k in ("role", "content", "tool_calls") if record.get(k)}
        call_id = record.get("tool_call_id") or (record.get("tool_call_ids") or [None])[0]
        if call_id:
            fields["tool_call_id"] = call_id
        messages.append(message_from_openai(fields, where=f"{path.name}[{i}]"))
    return messages


def test_real_transcripts_deterministic_bounded_and_grounded() -> None:
    directory = _transcripts_dir()
    if not directory.is_dir():
        pytest.skip(f"no transcripts at {directory}")
    files = sorted(directory.glob("swe_agent_function_calling/*.traj"))
    files += sorted(directory.glob("mini_swe_agent_v2_toolcall/*.traj.json"))
    if not files:
        pytest.skip(f"no SWE-agent or mini-swe-agent 2.x transcripts under {directory}")
    for path in files:
        messages = _load(path)
        assert len(messages) > 10, path
        system = messages[0] if messages[0].role == "system" else None
        region = messages[1:] if system else messages
        request = build_summary_request(system, region, (), window=20_000)
        text = ExtractiveSummarizer().summarize(request).text
        assert text == ExtractiveSummarizer().summarize(request).text
        assert 0 < len(text) <= request.max_tokens * 4
        assert "## Commands & outcomes" in text
        # Invent nothing: every file path listed occurs somewhere in the region.
        corpus = "\n".join(m.content + "".join(c.arguments for c in m.tool_calls) for m in region)
        for line in _section(text, "## Files & code").splitlines():
            assert line[2:] in corpus, (path.name, line)
