"""Summary request shape, instruction, cap and the summary message (design §4.4, §4.5), and
the summaries that count as failures (design §4.6)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxfold import (
    MaintenanceError,
    Message,
    SummaryFailedError,
    SummaryResult,
    ToolCall,
    ToolSchema,
)
from ctxfold.kernel.summary import (
    SUMMARY_HEADINGS,
    SUMMARY_INSTRUCTION,
    SUMMARY_INSTRUCTION_MARKER,
    briefing_tokens,
    build_summary_request,
    is_summary_message,
    is_summary_request,
    requested_length,
    summary_output_cap,
    unwrap_summary,
    validate_summary_result,
    wrap_summary,
)

SYSTEM = Message(role="system", content="You are a coding agent.")
REGION = (
    Message(role="user", content="Fix the failing test. Never touch setup.py."),
    Message(
        role="assistant",
        content="",
        tool_calls=(ToolCall(id="c1", name="shell", arguments='{"command": "pytest"}'),),
    ),
    Message(role="tool", content="1 failed", tool_call_id="c1", name="shell"),
)
TOOLS = (ToolSchema(name="shell", description="run", parameters={"type": "object"}),)


def test_headings_are_the_seven_of_the_spec_in_order() -> None:
    assert SUMMARY_HEADINGS == (
        "## Standing facts & constraints",
        "## Goal",
        "## Decisions & rationale",
        "## Files & code",
        "## Commands & outcomes",
        "## Errors & fixes",
        "## Pending & next step",
    )


def test_instruction_starts_with_marker_and_lists_headings_in_order() -> None:
    assert SUMMARY_INSTRUCTION.splitlines()[0] == SUMMARY_INSTRUCTION_MARKER
    positions = [SUMMARY_INSTRUCTION.index("\n" + h + "\n") for h in SUMMARY_HEADINGS]
    assert positions == sorted(positions)
    for rule in ("<compaction-summary>", "Invent nothing", "exactly", "Do not call any tools"):
        assert rule in SUMMARY_INSTRUCTION


@pytest.mark.parametrize(
    ("window", "cap"), [(1000, 512), (2048, 512), (40000, 8192), (1_000_000, 8192), (8000, 2000)]
)
def test_summary_output_cap(window: int, cap: int) -> None:
    assert summary_output_cap(window) == cap


def test_request_shape_system_first_region_verbatim_tools_identical_host_instruction() -> None:
    request = build_summary_request(SYSTEM, REGION, TOOLS, window=40000)
    assert request.messages[0] is SYSTEM
    assert request.messages[1:-1] == REGION
    assert all(a is b for a, b in zip(request.messages[1:-1], REGION, strict=True))
    assert request.tools == TOOLS
    last = request.messages[-1]
    assert (last.role, last.origin, last.content) == ("user", "host", SUMMARY_INSTRUCTION)
    assert request.max_tokens == 8192
    assert request.focus is None
    assert is_summary_request(request.messages)
    assert not is_summary_request(REGION)
    assert not is_summary_request(())


def test_request_without_system_and_with_focus() -> None:
    request = build_summary_request(None, REGION, (), window=1000, focus="  the parser bug ")
    assert request.messages[0] == REGION[0]
    assert request.max_tokens == 512
    assert request.messages[-1].content == (
        SUMMARY_INSTRUCTION
        + "\n\nAdditional focus for this compaction (prioritize keeping this):\nthe parser bug"
    )
    assert request.focus == "the parser bug"


def test_request_does_not_duplicate_system_or_send_local_only() -> None:
    local = Message(role="user", content="local note", local_only=True)
    request = build_summary_request(SYSTEM, (SYSTEM, local, *REGION), (), window=4096)
    assert [m.role for m in request.messages] == ["system", "user", "assistant", "tool", "user"]
    assert local not in request.messages


def test_wrap_exact_bytes_and_round_trip() -> None:
    message = wrap_summary("## Goal\n- fix it")
    assert message.role == "user"
    assert message.origin == "host"
    assert message.content == (
        "<compaction-summary>\nSummary of earlier conversation (older messages were "
        "compacted to save context):\n## Goal\n- fix it\n</compaction-summary>"
    )
    assert is_summary_message(message)
    assert unwrap_summary(message) == "## Goal\n- fix it"


@given(st.text().filter(lambda t: "</compaction-summary>" not in t))
def test_wrap_unwrap_round_trip_any_text(text: str) -> None:
    assert unwrap_summary(wrap_summary(text)) == text


def test_is_compaction_summary_needs_user_role_and_left_trimmed_tag() -> None:
    assert is_summary_message(Message(role="user", content="  \n<compaction-summary>x"))
    assert not is_summary_message(Message(role="assistant", content="<compaction-summary>"))
    assert not is_summary_message(Message(role="user", content="see <compaction-summary>"))
    with pytest.raises(MaintenanceError, match="not a <compaction-summary>"):
        unwrap_summary(Message(role="user", content="hello"))


def test_validate_accepts_text() -> None:
    assert validate_summary_result(SummaryResult(text="\n## Goal\n- x\n")) == "## Goal\n- x"


@pytest.mark.parametrize("text", ["", "   \n"])
def test_validate_rejects_empty(text: str) -> None:
    with pytest.raises(SummaryFailedError, match="empty output") as info:
        validate_summary_result(SummaryResult(text=text), session_id="s1")
    assert "'s1'" in str(info.value)
    assert isinstance(info.value, MaintenanceError)


def test_validate_rejects_length_truncation_even_with_text() -> None:
    with pytest.raises(SummaryFailedError, match="truncated"):
        validate_summary_result(SummaryResult(text="## Goal\n- half", finish_reason="length"))


@pytest.mark.parametrize(("window", "target"), [(4_000, 512), (27_904, 581), (59_904, 1_248),
                                                (123_904, 2_581), (200_000, 3_072),
                                                (1_000_000, 3_072)])
def test_briefing_length_is_a_48th_of_the_window_within_bounds(window: int,
                                                              target: int) -> None:
    assert briefing_tokens(window) == target


def test_the_instruction_asks_for_the_target_length_and_max_tokens_stays_the_cap() -> None:
    request = build_summary_request(SYSTEM, REGION, TOOLS, window=59_904,
                                    target_tokens=briefing_tokens(59_904), focus="parser")
    instruction = request.messages[-1].content
    assert request.target_tokens == 1_248 and request.max_tokens == 8_192  # never cut
    assert "- Length: about 1248 tokens." in instruction
    assert requested_length(instruction) == 1_248
    assert instruction.index("Length:") < instruction.index("parser")  # focus stays last
    assert is_summary_request(request.messages)
    assert requested_length(build_summary_request(None, REGION, (), window=1000)
                            .messages[-1].content) == 0  # nothing asked: nothing parsed


def test_the_engine_asks_for_the_briefing_length() -> None:
    from ctxfold.kernel import maintenance

    view = [SYSTEM, *REGION, *REGION[1:]]
    plan = maintenance.FoldPlan(head=2, end=4, tail_start=4)

    class Count:
        def estimate(self, shape: object) -> int:
            return 10

    planned = maintenance.summary_request(view, plan, tools=(), window=64_000, focus=None,
                                         cache_key="k", estimator=Count(),  # type: ignore
                                         count=lambda m: 5)
    assert planned is not None and planned.request.target_tokens == briefing_tokens(64_000)
