"""Billing under a provider that charges cache writes (the Anthropic price profiles)."""

from __future__ import annotations

import pytest

from ctxfold import Message
from ctxfold.plugins.estimators.heuristic import HeuristicEstimator
from ctxfold.replay.billing import Biller, make_cache, token_source_for
from ctxfold.replay.pricing import PRICES


def _biller(profile: str) -> Biller:
    estimator = HeuristicEstimator()
    cache, thinking = make_cache(PRICES[profile])
    return Biller(estimator, token_source_for(estimator), cache, PRICES[profile], thinking)


def _words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def test_uncached_input_is_written_and_the_next_request_reads_it() -> None:
    biller = _biller("anthropic-sonnet")
    price = PRICES["anthropic-sonnet"]
    system = Message(role="system", content=_words(900, "s"))
    history = [system, Message(role="user", content=_words(600, "u"))]
    reply = Message(role="assistant", content="done")
    first = biller.bill(history, (), reply)
    assert first.prompt >= 1024 and first.hit == 0
    assert first.miss_usd == pytest.approx(first.prompt * price.write / 1e6)  # 1.25x
    second = biller.bill([*history, reply, Message(role="user", content="next")], (), reply)
    assert 0.9 * first.prompt <= second.hit < second.prompt
    assert second.hit_usd == pytest.approx(second.hit * 0.30 / 1e6)
    # a fold keeps the system prompt: its breakpoint still reads
    folded = biller.bill([system, Message(role="user", content=_words(400, "f"))], (), reply)
    assert folded.hit > 0 and folded.hit < folded.prompt


def test_a_prompt_under_the_minimum_is_billed_at_the_base_price() -> None:
    biller = _biller("anthropic-haiku")  # 4,096-token minimum
    bill = biller.bill([Message(role="user", content=_words(200, "w"))], (),
                       Message(role="assistant", content="ok"))
    assert bill.prompt < 4096 and bill.hit == 0
    assert bill.miss_usd == pytest.approx(bill.prompt * PRICES["anthropic-haiku"].miss / 1e6)


def test_profiles_without_a_write_fee_bill_misses_at_the_miss_price() -> None:
    price = PRICES["deepseek-flash"]
    assert price.write is None and price.miss_price(10**6) == price.miss
    assert PRICES["anthropic-sonnet"].cost(0, 10**6, 0) == pytest.approx(3.75)
