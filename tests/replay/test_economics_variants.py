"""``benchmarks/bench_economics.py`` measures the defaults it claims to measure."""

from __future__ import annotations

import pytest
from benchmarks.bench_economics import DEFAULTS, VARIANTS

from ctxfold.engine import check
from ctxfold.kernel import maintenance, summary


def test_the_defaults_are_the_engine_s() -> None:
    from ctxfold.capabilities import bounding
    from ctxfold.kernel.config import AgentConfig
    from ctxfold.plugins.policies import ctxfold_engine

    assert {"prune": maintenance.PRUNE_ALONE_RATIO, "tail": maintenance.TAIL_RATIO,
                        "briefing": summary.BRIEFING_RATIO, "facts": check.FACTS_SHARE,
                        "head": maintenance.HEAD_PIN_RATIO, "ratio": AgentConfig().compact_ratio,
                        "bound": 1.0, "offer": "auto", "cap": 0,
                        "facts_billed": ctxfold_engine.BILL_FACTS_AS_OUTPUT} == DEFAULTS
    assert bounding.TOOL_CONTENT_BOUND == 32768  # what ``bound`` scales


def test_every_variant_changes_a_known_setting_to_another_value() -> None:
    assert VARIANTS["default"] == {}
    for name, changes in VARIANTS.items():
        assert set(changes) <= set(DEFAULTS), name
        assert all(DEFAULTS[k] != v for k, v in changes.items()), name


def _row(cost: float, kept: int, far_kept: int, failed: bool = False) -> dict[str, object]:
    return {"cost_usd": cost, "failed": failed, "summaries": 1, "prunes": 0,
            "retention": {"counts": {"facts_kept": kept, "facts_due": 10,
                                     "far_kept": far_kept, "far_due": 10}}}


def test_the_bar_is_against_the_cheapest_peer_that_completes_every_session() -> None:
    from benchmarks.bench_economics import figures

    by_policy = {
        "ctxfold": {"a": _row(0.8, 9, 5), "b": _row(0.9, 8, 5)},
        # cheaper, but fails a session: not the reference
        "cheap-but-fails": {"a": _row(0.1, 9, 9), "b": _row(0.1, 9, 9, failed=True)},
        "codex-like": {"a": _row(1.0, 8, 5), "b": _row(1.0, 8, 4)},
        "opencode-like": {"a": _row(1.5, 9, 9), "b": _row(1.5, 9, 9)},
    }
    fig = figures(by_policy, ["cheap-but-fails", "codex-like", "opencode-like"], ["ctxfold"])
    assert fig["cheapest_peer"] == "codex-like"
    mine = fig["rows"]["ctxfold"]["vs_cheapest"]
    assert mine["cost_ratio"] == pytest.approx(0.85) and mine["continuation"] == [0.85, 0.8]
    assert mine["meets_bar"]  # 0.85x at 85% vs 80% continuation and 50% vs 45% far
    by_policy["ctxfold"]["b"] = _row(0.9, 8, 3)  # far facts now below the peer's
    assert not figures(by_policy, ["codex-like"], ["ctxfold"])["rows"]["ctxfold"][
        "vs_cheapest"]["meets_bar"]
