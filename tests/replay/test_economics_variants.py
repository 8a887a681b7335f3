"""``benchmarks/bench_economics.py`` measures the defaults it claims to measure."""

from __future__ import annotations

from benchmarks.bench_economics import VARIANTS

from ctxfold.engine import review
from ctxfold.kernel import fold, maintenance, summary


def test_the_default_variant_is_the_engine_s_defaults() -> None:
    assert VARIANTS["default"] == (maintenance.PRUNE_ALONE_RATIO, fold.TAIL_RATIO,
                                   summary.BRIEFING_RATIO, review.FACTS_SHARE,
                                   fold.HEAD_PIN_RATIO)


def test_every_other_variant_differs_from_the_defaults() -> None:
    default = VARIANTS["default"]
    assert all(values != default for name, values in VARIANTS.items() if name != "default")
