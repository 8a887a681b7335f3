"""Building one checkpoint: the summary request that fits, and the candidate view."""

from __future__ import annotations

from ctxfold import Message, RequestShape, ToolCall
from ctxfold.kernel import maintenance
from ctxfold.kernel.summary import SUMMARY_INSTRUCTION_MARKER, is_summary_message
from ctxfold.testing import CharEstimator


def session(sizes: list[int]) -> list[Message]:
    out = [Message(role="system", content="s"), Message(role="user", content="task")]
    for i, size in enumerate(sizes):
        out.append(Message(role="assistant", content="a",
                           tool_calls=(ToolCall(id=f"c{i}", name="bash"),)))
        out.append(Message(role="tool", content="r" * size, tool_call_id=f"c{i}"))
    return out


def request(view: list[Message], plan: maintenance.FoldPlan, window: int):
    return maintenance.summary_request(view, plan, tools=(), window=window, focus=None,
                                      cache_key="k", estimator=CharEstimator(),
                                      count=lambda m: len(m.content))


def test_a_region_that_fits_is_requested_whole_as_a_cached_prefix() -> None:
    view = session([100] * 6)
    plan = maintenance.FoldPlan(head=2, end=10, tail_start=10)
    planned = request(view, plan, window=10_000)
    assert planned is not None and planned.plan == plan
    sent = planned.request.messages
    assert list(sent[:-1]) == [view[0], *view[1:10]]  # system + the region exactly as sent
    assert sent[-1].content.startswith(SUMMARY_INSTRUCTION_MARKER)
    assert planned.request.cache_key == "k"


def test_a_region_too_large_folds_up_to_the_largest_safe_end() -> None:
    view = session([1000] * 8)
    limit = maintenance.summary_limit(6000)
    plan = maintenance.FoldPlan(head=2, end=16, tail_start=16)
    planned = request(view, plan, window=6000)
    assert planned is not None and planned.plan.end < 16
    assert view[planned.plan.end].role != "tool"
    assert CharEstimator().estimate(RequestShape(list(planned.request.messages))) <= limit
    longer = request(view, maintenance.FoldPlan(head=2, end=planned.plan.end + 2, tail_start=16),
                     window=6000)
    assert longer is not None and longer.plan.end == planned.plan.end  # it is the largest


def test_a_single_message_too_large_for_any_request_is_clipped_in_the_request() -> None:
    view = session([50_000, 10])
    plan = maintenance.FoldPlan(head=2, end=4, tail_start=4)
    planned = request(view, plan, window=20_000)
    assert planned is not None and planned.plan.end == 4
    clipped = planned.request.messages[3]  # system, task, call, its result, instruction
    assert maintenance.CLIP_MARKER in clipped.content and len(clipped.content) < 50_000
    assert len(view[3].content) == 50_000  # canonical keeps it


def test_a_message_no_request_could_hold_is_clipped_rather_than_left_unfolded() -> None:
    # Folding only the rounds before the 50k result would fit, but it leaves that result
    # verbatim, above any window, and no later fold could take it unclipped: clip it now.
    view = session([1000, 1000, 50_000, 10])
    plan = maintenance.FoldPlan(head=2, end=8, tail_start=8)
    planned = request(view, plan, window=20_000)
    assert planned is not None and planned.plan.end == 8
    assert any(maintenance.CLIP_MARKER in m.content for m in planned.request.messages)
    assert len(view[7].content) == 50_000  # canonical keeps it


def test_the_candidate_replaces_the_region_with_one_summary() -> None:
    view = session([100] * 4)
    plan = maintenance.FoldPlan(head=2, end=6, tail_start=6)
    made = maintenance.candidate(view, plan, "## Goal\n- g", projection=None, canonical=view,
                                window=100_000, count=lambda m: len(m.content))
    assert made.covered_count == 6
    assert [is_summary_message(m) for m in made.view].count(True) == 1
    assert made.view == [*view[:2], made.body[2], *view[6:]]


def test_the_candidate_keeps_a_large_task_clipped_and_the_pruned_tail() -> None:
    view = session([100] * 4)
    view[1] = Message(role="user", content="T" * 9_000)  # over 8% of a 100,000 window
    pruned = [m if m.role != "tool" else Message(role="tool", content="p",
                                                  tool_call_id=m.tool_call_id) for m in view]
    plan = maintenance.FoldPlan(head=2, end=4, tail_start=4)
    made = maintenance.candidate(view, plan, "## Goal\n- g", projection=None, canonical=view,
                                window=100_000, count=lambda m: len(m.content), pruned=pruned)
    task = made.body[1]
    assert len(task.content) < 8_000 and '{"ref": "#1"}' in task.content
    assert made.covered_count == len(view)  # the pruned tail is part of the body
    assert [m.content for m in made.body[3:]] == [m.content for m in pruned[4:]]
    assert "#2–#3" in made.body[2].content  # the lookup hint names what was folded
