"""The view rule (design §2.1) and its incremental estimate (design §2.2)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxfold import Message, Projection, RequestShape, ToolSchema
from ctxfold.kernel.view import ViewTracker, input_hash, message_counter, visible_view
from ctxfold.plugins.estimators.heuristic import HeuristicEstimator

SYSTEM = Message(role="system", content="sys v1")


def test_without_projection_the_view_is_canonical_minus_local_only() -> None:
    note = Message(role="user", content="n", local_only=True)
    canonical = [SYSTEM, Message(role="user", content="u"), note]
    assert visible_view(None, canonical) == canonical[:2]


def test_with_projection_the_view_is_body_plus_uncovered_tail() -> None:
    canonical = [SYSTEM, *(Message(role="user", content=str(i)) for i in range(5))]
    body = (SYSTEM, Message(role="user", content="summary"))
    view = visible_view(Projection(messages=body, covered_count=4), canonical)
    assert view == [*body, *canonical[4:]]


def test_a_refreshed_system_prompt_replaces_the_one_in_the_body() -> None:
    canonical = [Message(role="system", content="sys v2"), Message(role="user", content="u")]
    body = (SYSTEM, Message(role="user", content="summary"))
    view = visible_view(Projection(messages=body, covered_count=2), canonical)
    assert view[0].content == "sys v2" and view[1].content == "summary"


def test_the_input_hash_includes_the_cache_key() -> None:
    view = [Message(role="user", content="u")]
    assert input_hash("a|b|m1", view) != input_hash("a|b|m2", view)
    assert input_hash("a|b|m1", view) == input_hash("a|b|m1", list(view))


@given(texts=st.lists(st.text(min_size=0, max_size=60), min_size=1, max_size=25),
       split=st.integers(0, 25))
def test_the_tracker_extends_incrementally_to_the_full_estimate(texts: list[str],
                                                               split: int) -> None:
    estimator = HeuristicEstimator()
    tools = (ToolSchema(name="bash"),)
    canonical = [SYSTEM, *(Message(role="user", content=t) for t in texts)]
    tracker = ViewTracker(estimator)
    tracker.measure(None, canonical[: max(1, split)], tools)  # warm on a prefix
    view, tokens = tracker.measure(None, canonical, tools)
    assert view == canonical
    assert tokens == estimator.estimate(RequestShape(canonical, tools))


def test_a_new_projection_resets_the_tracked_view() -> None:
    tracker = ViewTracker(HeuristicEstimator())
    canonical = [SYSTEM, *(Message(role="user", content="x" * 40) for _ in range(4))]
    full, _ = tracker.measure(None, canonical, ())
    body = (SYSTEM, Message(role="user", content="s"))
    folded, _ = tracker.measure(Projection(messages=body, covered_count=3), canonical, ())
    assert len(full) == 5 and folded == [*body, *canonical[3:]]


def test_the_planning_count_uses_the_estimators_own_count_when_it_has_one() -> None:
    estimator = HeuristicEstimator()
    message = Message(role="user", content="hello world " * 10)
    assert message_counter(estimator)(message) == estimator.count_message(message)

    class Plain:  # not incremental: a one-message request shape
        name = "plain"

        def estimate(self, shape: RequestShape) -> int:
            return 1000 + len(shape.messages)

        def calibrate(self, shape: RequestShape, usage: object) -> bool:
            return False

        def reset_calibration(self) -> None:
            pass

    assert message_counter(Plain())(message) == 1001
