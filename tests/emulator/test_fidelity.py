"""The DeepSeek profile reproduces the provider's own cache-hit figures on real sessions."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data" / "transcripts" / "mini_swe_agent_v2_toolcall"


def _bench():
    spec = importlib.util.spec_from_file_location(
        "bench_emulator_fidelity", REPO / "benchmarks" / "bench_emulator_fidelity.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["deepseek_chat_dev_rerun__pylint-dev__astroid-1333",
                                  "deepseek_reasoner_dev__sqlfluff__sqlfluff-1763"])
def test_hit_ratio_matches_real_sessions(name: str) -> None:
    path = DATA / f"{name}.traj.json"
    if not path.exists():
        pytest.skip(f"real transcripts not available at {DATA}")
    result = _bench().replay(path, limit=40)
    rows = result["rows"]
    assert len(rows) == 40
    later = rows[1:]  # the first request hits other sessions' prefixes at the real provider
    within = [r for r in later if abs(r["delta"]) <= 0.02]
    assert len(within) >= 0.95 * len(later)
    # prompt growth per round matches the provider token for token
    growth = [(b["real_prompt"] - a["real_prompt"]) - (b["emu_prompt"] - a["emu_prompt"])
              for a, b in itertools.pairwise(rows)]
    assert sorted(growth)[len(growth) // 2] == 0
