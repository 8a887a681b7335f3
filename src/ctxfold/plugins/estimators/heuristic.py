"""The ``heuristic`` estimator: characters × a calibrated ratio, CJK-aware (design §2.2).

Cold (before calibration) it prices Latin-script text at ≈ 0.25 tokens per character and CJK
text (Han, kana, Hangul, fullwidth forms) at ≈ 1 token per character (design §2.3). After the
first trusted provider usage the calibrated ratio takes over, except for CJK characters in
excess of the calibration sample's CJK share, which keep the cold price (design §2.3). No
dependencies, so it is the fallback when no tokenizer is installed.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxfold.kernel.hookspecs import hookimpl
from ctxfold.kernel.kinds import StrategyContext, StrategySpec
from ctxfold.plugins.estimators.base import TokenizerEstimator, cjk_count

#: Cold tokens per character of non-CJK text (design §2.3).
COLD_TOKENS_PER_CHAR = 0.25


class HeuristicEstimator(TokenizerEstimator):
    """Character-based estimator; exact enough once calibrated, free to run."""

    name = "heuristic"
    cjk_aware = True

    def count_text(self, text: str) -> int:
        """≈ 1 token per CJK character plus ≈ 1 per 4 other characters (rounded up)."""
        if not text:
            return 0
        cjk = cjk_count(text)
        return cjk + ((len(text) - cjk) + 3) // 4

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        return [self.count_text(t) for t in texts]


def _factory(context: StrategyContext) -> HeuristicEstimator:
    return HeuristicEstimator()


@hookimpl
def ctxfold_estimators() -> list[StrategySpec]:
    """Register the ``heuristic`` estimator."""
    return [
        StrategySpec(
            name="heuristic",
            factory=_factory,
            description="chars x calibrated ratio (0.25/char cold, 1/CJK char); no dependencies",
        )
    ]
