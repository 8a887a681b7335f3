"""The heuristic estimator: cold rates and CJK-aware calibration (design §2.3)."""

from __future__ import annotations

import pytest

from ctxfold import Config, Message, Registry, RequestShape, Usage
from ctxfold.kernel.kinds import ESTIMATOR
from ctxfold.plugins.estimators.heuristic import HeuristicEstimator


@pytest.fixture
def est() -> HeuristicEstimator:
    return HeuristicEstimator()


def test_registered_by_name() -> None:
    registry = Registry.from_config(load_entry_points=False)
    built = registry.create(ESTIMATOR, "heuristic", config=Config())
    assert isinstance(built, HeuristicEstimator)
    assert built.name == "heuristic"


def test_cold_latin_rate_is_a_quarter_token_per_char(est: HeuristicEstimator) -> None:
    assert est.count_text("a" * 400) == 100
    assert est.count_text("abc") == 1  # rounded up
    assert est.count_text("") == 0


def test_cold_cjk_rate_is_one_token_per_char(est: HeuristicEstimator) -> None:
    assert est.count_text("你好世界") == 4
    assert est.count_text("こんにちはカタカナ") == 9
    assert est.count_text("안녕하세요") == 5
    assert est.count_text("ＡＢＣ") == 3
    assert est.count_text("你好" + "a" * 8) == 4


def test_cold_request_estimate(est: HeuristicEstimator) -> None:
    msg = Message(role="user", content="中" * 100)
    # 4 overhead + ceil(4 / 4) for "user" + 100 CJK
    assert est.raw_estimate(RequestShape(messages=[msg])) == 105


def test_excess_cjk_keeps_the_cold_price_after_latin_calibration(
    est: HeuristicEstimator,
) -> None:
    latin = RequestShape(messages=[Message(role="user", content="word " * 800)])
    raw = est.raw_estimate(latin)
    assert est.calibrate(latin, Usage(prompt_tokens=raw // 2))
    ratio = est.calibration.ratio if est.calibration else 0
    assert ratio == pytest.approx(0.5, abs=0.01)
    chinese = RequestShape(messages=[*latin.messages,
                                     Message(role="user", content="汉" * 2000)])
    # The 2000 CJK chars are all "excess" over a 0% CJK sample: priced at 1/char, not 0.5.
    assert est.estimate(chinese) >= 2000 + (raw // 2)
    assert est.estimate(chinese) < est.raw_estimate(chinese)


def test_calibration_sample_with_cjk_scales_cjk_too(est: HeuristicEstimator) -> None:
    mixed = RequestShape(messages=[Message(role="user", content="汉" * 1000)])
    raw = est.raw_estimate(mixed)
    assert est.calibrate(mixed, Usage(prompt_tokens=raw // 2))
    # Same CJK share as the sample: no excess, plain ratio.
    assert est.estimate(mixed) == pytest.approx(raw // 2, abs=1)


def test_sanity_window_uses_tokens_per_char(est: HeuristicEstimator) -> None:
    s = RequestShape(messages=[Message(role="user", content="x" * 9996)])  # 10000 chars
    assert not est.calibrate(s, Usage(prompt_tokens=500))  # 0.05 exactly: rejected
    assert est.calibrate(s, Usage(prompt_tokens=501))
    assert not est.calibrate(s, Usage(prompt_tokens=20000))  # 2.0 exactly: rejected
