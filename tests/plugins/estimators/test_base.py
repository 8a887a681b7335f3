"""TokenizerEstimator: overhead arithmetic, incremental cache, calibration (design §2.2, §2.3)."""

from __future__ import annotations

import json

import pytest

from ctxfold import (
    Estimator,
    Message,
    RequestShape,
    TokenizerEstimator,
    ToolCall,
    ToolSchema,
    Usage,
)
from ctxfold.plugins.estimators.base import LRUCache, cjk_count


class CharEstimator(TokenizerEstimator):
    """One token per character; records every text it was asked to count."""

    name = "chars"

    def __init__(self, cache_size: int = 1000) -> None:
        super().__init__(cache_size)
        self.calls: list[str] = []

    def count_text(self, text: str) -> int:
        self.calls.append(text)
        return len(text)


def shape(*messages: Message, tools: tuple[ToolSchema, ...] = ()) -> RequestShape:
    return RequestShape(messages=list(messages), tools=tools)


def test_satisfies_the_estimator_protocol() -> None:
    assert isinstance(CharEstimator(), Estimator)


def test_message_overheads() -> None:
    est = CharEstimator()
    user = Message(role="user", content="hello")  # 4 + 4 (role) + 5
    assert est.raw_estimate(shape(user)) == 13
    named = Message(role="tool", content="ok", name="bash", tool_call_id="c1")
    assert est.raw_estimate(shape(named)) == 4 + 4 + 2 + 4 + 2


def test_tool_call_and_reasoning_overheads() -> None:
    est = CharEstimator()
    call = ToolCall(id="c1", name="bash", arguments='{"a":1}')
    msg = Message(role="assistant", content="x", tool_calls=(call,), reasoning_content="think")
    # 4 + 9 (assistant) + 1 + 5 (reasoning) + 8 + 2 + 4 + 7
    assert est.raw_estimate(shape(msg)) == 40


def test_reasoning_counted_only_with_tool_calls() -> None:
    est = CharEstimator()
    msg = Message(role="assistant", content="x", reasoning_content="long thoughts")
    assert est.raw_estimate(shape(msg)) == 4 + 9 + 1


def test_tool_schema_overhead() -> None:
    est = CharEstimator()
    params = {"type": "object", "properties": {}}
    tool = ToolSchema(name="bash", description="run", parameters=params)
    expected = 8 + 4 + 3 + len(json.dumps(params, ensure_ascii=False))
    assert est.raw_estimate(shape(tools=(tool,))) == expected


def test_raw_content_never_counted_and_local_only_skipped() -> None:
    est = CharEstimator()
    bounded = Message(role="tool", content="short", raw_content="x" * 10_000, tool_call_id="c")
    assert est.raw_estimate(shape(bounded)) == 4 + 4 + 5 + 1
    assert all("x" * 100 not in t for t in est.calls)
    hidden = Message(role="user", content="not sent", local_only=True)
    assert est.raw_estimate(shape(hidden, bounded)) == 4 + 4 + 5 + 1
    assert est.count_message(hidden) == 0


def test_estimating_turn_n_plus_1_counts_only_the_new_message() -> None:
    est = CharEstimator()
    messages = [Message(role="user" if i % 2 else "assistant", content=f"turn {i}")
                for i in range(20)]
    est.raw_estimate(shape(*messages))
    before = len(est.calls)
    new = Message(role="user", content="the new one")
    est.raw_estimate(shape(*messages, new))
    assert est.calls[before:] == ["user", "the new one"]


def test_cache_is_shared_by_equal_messages_and_by_fingerprint() -> None:
    est = CharEstimator()
    est.raw_estimate(shape(Message(role="user", content="same")))
    n = len(est.calls)
    # Equal value, new object: message-level hit.
    est.raw_estimate(shape(Message(role="user", content="same")))
    # Different local fields only: fingerprint-level hit.
    est.raw_estimate(shape(Message(role="user", content="same", id="m9", created_at="t")))
    assert len(est.calls) == n


def test_lru_cache_is_bounded() -> None:
    cache: LRUCache[int, int] = LRUCache(3)
    for i in range(5):
        cache.put(i, i)
    assert len(cache) == 3
    assert cache.get(0) is None
    assert cache.get(4) == 4


def test_cjk_count() -> None:
    assert cjk_count("plain ascii") == 0
    assert cjk_count("中文かなカナ한국ＡＢ") == 10
    assert cjk_count("café ü") == 0


def test_calibration_scales_estimates_and_resets() -> None:
    est = CharEstimator()
    s = shape(Message(role="user", content="x" * 992))  # raw = 4 + 4 + 992 = 1000
    assert est.raw_estimate(s) == 1000
    assert est.calibrate(s, Usage(prompt_tokens=500))
    assert est.calibration is not None and est.calibration.ratio == 0.5
    assert est.estimate(s) == 500
    assert est.raw_estimate(s) == 1000
    est.reset_calibration()
    assert est.calibration is None
    assert est.estimate(s) == 1000


@pytest.mark.parametrize(
    "usage",
    [
        Usage(prompt_tokens=500, aggregated=True),
        Usage(prompt_tokens=500, estimated=True),
        Usage(prompt_tokens=0),
        Usage(prompt_tokens=-3),
        Usage(prompt_tokens=40),  # 40 / 996 chars = 0.04 tokens per char: below 0.05
        Usage(prompt_tokens=2000),  # 2.01 tokens per char: not below 2
    ],
)
def test_calibration_rejected(usage: Usage) -> None:
    est = CharEstimator()
    s = shape(Message(role="user", content="x" * 992))
    assert not est.calibrate(s, usage)
    assert est.calibration is None
    assert est.estimate(s) == 1000


def test_calibration_sanity_window_is_open_interval_inside() -> None:
    est = CharEstimator()
    s = shape(Message(role="user", content="x" * 9992))  # 9996 chars
    assert est.calibrate(s, Usage(prompt_tokens=500))  # 0.05002 per char
    assert est.calibrate(s, Usage(prompt_tokens=19990))  # 1.9998 per char


def test_tiny_prompts_never_calibrate() -> None:
    # Template overheads dominate a 13-token request; its ratio would mis-scale later ones.
    est = CharEstimator()
    s = shape(Message(role="user", content="x" * 292))
    assert not est.calibrate(s, Usage(prompt_tokens=255))
    assert est.calibrate(s, Usage(prompt_tokens=256))


def test_latest_accepted_sample_wins() -> None:
    est = CharEstimator()
    s = shape(Message(role="user", content="x" * 992))
    est.calibrate(s, Usage(prompt_tokens=500))
    est.calibrate(s, Usage(prompt_tokens=800))
    assert est.estimate(s) == 800


def test_count_messages_applies_calibration_without_request_overheads() -> None:
    est = CharEstimator()
    msgs = [Message(role="user", content="x" * 992), Message(role="user", content="y" * 992)]
    assert est.count_messages(msgs) == 2000
    assert est.count_message(msgs[0]) == 1000
    est.calibrate(shape(*msgs), Usage(prompt_tokens=1000))
    assert est.count_messages(msgs) == 1000
    assert est.count_message(msgs[0]) == 500
