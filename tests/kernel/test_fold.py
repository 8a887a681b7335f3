"""Fold planning rules (design §4.1–§4.3, §4.7), tested on the pure functions of
the fold path (``ctxfold.kernel.maintenance``, section 7).

Every message counts its content length in tokens, so each expectation can be worked out by
hand.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxfold import Message, ToolCall
from ctxfold.kernel import maintenance
from ctxfold.kernel.summary import wrap_summary
from ctxfold.kernel.view import canonical_index


def count(message: Message) -> int:
    return len(message.content)


def sys_(text: str = "s" * 10) -> Message:
    return Message(role="system", content=text)


def user(text: str) -> Message:
    return Message(role="user", content=text)


def call(call_id: str, text: str = "a" * 10) -> Message:
    return Message(role="assistant", content=text,
                   tool_calls=(ToolCall(id=call_id, name="bash", arguments="{}"),))


def result(call_id: str, text: str) -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id, name="bash")


# -- head ------------------------------------------------------------------------------------


def test_head_pins_system_and_task_statement() -> None:
    view = [sys_(), user("t" * 80), call("c1"), result("c1", "r")]
    assert maintenance.head_length(view, window=1000, count=count) == 2
    assert maintenance.head_length(view, window=10, count=count) == 2  # however large the task


def test_a_task_within_8_percent_is_pinned_verbatim_a_larger_one_clipped_once() -> None:
    task = user("".join(f"word{i} " for i in range(400)))  # 3,090 tokens (chars) here
    assert maintenance.pinned_task(task, 1, window=40_000, count=count) is task  # 3,090 <= 3,200
    clipped = maintenance.pinned_task(task, 1, window=10_000, count=count)  # budget 800
    assert count(clipped) <= 800 and clipped.raw_content is None
    assert clipped.content.startswith("word0 word1") and clipped.content.endswith("word399 ")
    assert '"session:message" {"ref": "#1"}' in clipped.content
    # Idempotent: the next checkpoint pins exactly the same bytes (a cache hit).
    assert maintenance.pinned_task(clipped, 1, window=10_000, count=count) is clipped
    assert maintenance.pinned_task(clipped, 1, window=5_000, count=count) is clipped


def test_head_never_pins_an_earlier_summary_as_the_task() -> None:
    view = [sys_(), wrap_summary("old"), call("c1")]
    assert maintenance.head_length(view, window=10**6, count=count) == 1


# -- tail ------------------------------------------------------------------------------------


def test_tail_never_starts_on_a_tool_result() -> None:
    # A tail budget of 160 tokens would start the tail at the second result of c2.
    view = [sys_(), user("task"), call("c1"), result("c1", "x" * 500),
            call("c2"), result("c2", "y" * 100), result("c2", "z" * 100)]
    window = round(160 / maintenance.TAIL_RATIO)
    start = maintenance.tail_start(view, head=2, window=window, count=count)
    assert view[start].role == "assistant" and view[start].tool_calls[0].id == "c2"


def test_tail_keeps_the_newest_complete_round_even_over_budget() -> None:
    view = [sys_(), user("task"), call("c1"), result("c1", "x" * 5000)]
    assert maintenance.tail_start(view, head=2, window=1000, count=count) == 2


def test_a_finished_round_over_budget_folds_when_a_user_turn_follows_it() -> None:
    # The newest round is then the user's turn: a huge answer before it is not kept.
    view = [sys_(), user("task"), call("c1"), result("c1", "x" * 50),
            Message(role="assistant", content="y" * 5000), user("that was not an action")]
    assert maintenance.tail_start(view, head=2, window=1000, count=count) == 5
    # The same answer with nothing after it is the newest round, kept over budget.
    assert maintenance.tail_start(view[:5], head=2, window=1000, count=count) == 4
    # Tool results after the last call stay with it; the user turn after them starts the tail.
    calls = [*view[:4], user("y" * 5000)]
    assert maintenance.tail_start(calls, head=2, window=1000, count=count) == 4


def test_a_thrash_tail_folds_all_but_the_newest_round() -> None:
    view = [sys_(), user("task")]
    for i in range(12):
        view += [call(f"c{i}"), result(f"c{i}", "x" * 90)]  # 100 tokens a round
    window = 10_000  # 5 %: 500 tokens, five rounds; 1 %: 100 tokens, the newest round
    normal = maintenance.plan_fold(view, window, count, forced=False)
    widened = maintenance.plan_fold(view, window, count, forced=False,
                             tail_ratio=maintenance.THRASH_TAIL_RATIO)
    assert normal is not None and widened is not None
    assert (len(view) - normal.end, len(view) - widened.end) == (10, 2)


@given(sizes=st.lists(st.integers(1, 400), min_size=1, max_size=30),
       window=st.integers(500, 5000))
def test_tail_start_is_never_a_tool_result_for_any_session(sizes: list[int], window: int) -> None:
    view: list[Message] = [sys_(), user("task")]
    for i, size in enumerate(sizes):
        view += [call(f"c{i}"), result(f"c{i}", "x" * size)]
    start = maintenance.tail_start(view, head=2, window=window, count=count)
    assert 2 <= start < len(view) and view[start].role != "tool"


# -- plan ------------------------------------------------------------------------------------


def test_plan_needs_two_messages_and_400_tokens_unless_forced() -> None:
    # Window 1000: the tail (160 tokens) keeps call c2 and its result; c1's round folds.
    small = [sys_(), user("task"), call("c1", "a" * 100), result("c1", "b" * 100),
             call("c2", "c" * 100), result("c2", "d" * 100)]
    assert maintenance.plan_fold(small, 1000, count, forced=False) is None  # 200 < 400 tokens
    forced = maintenance.plan_fold(small, 1000, count, forced=True)
    assert forced is not None and (forced.head, forced.end, forced.tail_start) == (2, 4, 4)
    bigger = [*small[:2], call("c0", "e" * 300), result("c0", "f" * 100), *small[2:]]
    planned = maintenance.plan_fold(bigger, 1000, count, forced=False)
    assert planned is not None and (planned.head, planned.end) == (2, 6)  # 600 tokens fold
    one = [sys_(), user("task"), call("c1")]
    assert maintenance.plan_fold(one, 1000, count, forced=True) is None


def test_balanced_ends_never_cut_between_a_call_and_its_results() -> None:
    view = [sys_(), user("task"), call("c1"), result("c1", "r"), result("c1", "r"),
            call("c2"), result("c2", "r"), call("c3"), result("c3", "r")]
    plan = maintenance.FoldPlan(head=2, end=7, tail_start=7)
    ends = maintenance.balanced_ends(view, plan)
    assert ends == [5, 7] and all(view[e].role != "tool" for e in ends)


@given(fits_upto=st.integers(0, 40), n=st.integers(1, 40))
def test_largest_safe_end_is_the_largest_end_that_fits(fits_upto: int, n: int) -> None:
    ends = list(range(n))
    best = maintenance.largest_safe_end(ends, lambda end: end <= fits_upto)
    assert best == (min(fits_upto, n - 1) if fits_upto >= 0 else None)


def test_largest_safe_end_is_none_when_nothing_fits() -> None:
    assert maintenance.largest_safe_end([3, 4, 5], lambda _end: False) is None


# -- the new body and its coverage ----------------------------------------------------------


def test_fold_into_the_tail_maps_view_positions_back_over_local_only_messages() -> None:
    note = Message(role="user", content="display only", local_only=True)
    canonical = [sys_(), user("task"), call("c1"), note, result("c1", "r"), call("c2"),
                 result("c2", "r")]
    view = [m for m in canonical if not m.local_only]
    plan = maintenance.FoldPlan(head=2, end=4, tail_start=4)  # folds call c1 and its result
    body, covered = maintenance.fold_body(view, plan, wrap_summary("s"), body_len=0,
                                   covered_count=0, canonical=canonical)
    assert [m.role for m in body] == ["system", "user", "user"]
    # View index 4 (call c2) is canonical index 5: the local-only note is skipped, not added.
    assert covered == 5 and canonical[covered] is canonical[5]


def test_fold_inside_the_old_body_keeps_its_coverage_and_rest() -> None:
    canonical = [sys_(), user("task"), call("c1"), result("c1", "r"), call("c2"),
                 result("c2", "r"), call("c3"), result("c3", "r")]
    old_body = [sys_(), user("task"), wrap_summary("old"), call("c2"), result("c2", "r")]
    view = [*old_body, *canonical[6:]]
    plan = maintenance.FoldPlan(head=2, end=4, tail_start=5)  # summary + call c2 fold
    body, covered = maintenance.fold_body(view, plan, wrap_summary("new"), body_len=5,
                                   covered_count=6, canonical=canonical)
    assert covered == 6
    assert body[2].content.endswith("new\n</compaction-summary>") and body[3:] == [
        result("c2", "r")]


@pytest.mark.parametrize(("start", "visible", "expected"), [(0, 0, 0), (0, 2, 3), (2, 1, 4),
                                                            (0, 9, 5)])
def test_canonical_index_skips_local_only(start: int, visible: int, expected: int) -> None:
    canonical = [user("a"), user("b"), Message(role="user", content="n", local_only=True),
                 user("c"), user("d")]
    assert canonical_index(canonical, start, visible) == expected


def test_clip_text_keeps_head_and_tail_around_the_marker() -> None:
    text = "h" * 3000 + "t" * 1000
    clipped = maintenance.clip_text(text, 1000)
    assert clipped.startswith("h" * 750) and clipped.endswith("t" * 250)
    assert maintenance.CLIP_MARKER in clipped
    assert maintenance.clip_text("short", 1000) == "short"
