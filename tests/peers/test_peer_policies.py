"""The real-library policies (the ``peers`` extra): each runs the library's own code offline,
on the demo session and on two shared transcripts, with the replay's one cost model.

Marked ``peers``: CI runs these in their own step after installing the extra. There the
libraries are required — a missing one fails, it does not skip.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from ctxfold.kernel.config import Config
from ctxfold.kernel.registry import Registry
from ctxfold.plugins.policies.peers import PEERS
from ctxfold.replay import DEFAULT_RESERVE_OUTPUT, ReplaySettings, replay_paths, replay_sessions
from ctxfold.replay.demo import DEMO_WINDOW, demo_session

pytestmark = pytest.mark.peers

TRANSCRIPTS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "transcripts"
SHARED = [TRANSCRIPTS / "openhands_v1_events" / "40c95fc35bde4128a8802e7a40419901",
          TRANSCRIPTS / "mini_swe_agent_v2_toolcall"]
NAMES = tuple(PEERS)


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry.from_config(Config())


def test_every_peer_library_is_installed(registry: Registry) -> None:
    assert {n: why for n, why in registry.unavailable("policy").items() if n in PEERS} == {}


@pytest.fixture(scope="module")
def demo(registry: Registry) -> Any:
    settings = ReplaySettings(window=DEMO_WINDOW, policies=(*NAMES, "append-only", "ctxfold"))
    [result] = replay_sessions([demo_session()], settings, registry=registry)
    return result


def test_each_adapter_says_what_is_the_library_and_what_is_the_adapter() -> None:
    for module, *_ in PEERS.values():
        doc = importlib.import_module(f"ctxfold.plugins.policies.peers.{module}").__doc__ or ""
        assert "**Library code that runs**" in doc and "**Adapter code**" in doc, module


def test_peers_run_under_the_same_cost_model(demo: Any) -> None:
    budget = DEMO_WINDOW - DEFAULT_RESERVE_OUTPUT
    for name in NAMES:
        result = demo.policies[name]
        assert result.requests > 0, name
        assert result.canonical_intact, name
        assert sum(result.breakdown.as_dict().values()) == pytest.approx(result.cost_usd,
                                                                         abs=1e-7)
        if result.failed:  # a library that ignores the window overflows, with the reason
            assert "input budget" in result.failure or "library raised" in result.failure
        else:
            assert result.max_request_tokens <= budget, name
        assert result.fidelity.mean is not None, name


def test_langchain_summaries_fall_back_to_a_placeholder(demo: Any) -> None:
    """Upstream langchain-ai/langchain#39261: with the default 4,000-token trim and no
    human message in the last 4,000 tokens, the summary is the fixed fallback text, and the
    request's fidelity shows what was lost."""
    result = demo.policies["langchain-summarization"]
    assert not result.failed
    assert result.prunes > 0  # it did install (a summary message) …
    assert result.summaries == 0  # … without a summary call: the placeholder
    assert result.fidelity.mean < demo.policies["ctxfold"].fidelity.mean


def test_tool_output_trimmer_trims_nothing_in_a_one_task_run(demo: Any) -> None:
    """``recent_turns=2`` counts user turns: a single-task agent run has one, so every
    request is append-only's, up to the same overflow."""
    trimmer, append_only = demo.policies["openai-agents-trimmer"], demo.policies["append-only"]
    assert trimmer.failed and append_only.failed
    assert trimmer.requests == append_only.requests


@pytest.mark.skipif(not TRANSCRIPTS.is_dir(), reason="../shared is not beside this clone")
def test_peers_on_two_shared_transcripts(registry: Registry) -> None:
    settings = ReplaySettings(window=32_000, policies=(*NAMES, "ctxfold"))
    paths = [SHARED[0], next(p for p in sorted(SHARED[1].iterdir()) if p.suffix == ".json")]
    results = replay_paths(paths, settings, registry=registry)
    assert len(results) == 2
    for session in results:
        for name in NAMES:
            result = session.policies[name]
            assert result.requests > 0 and result.canonical_intact, (session.name, name)
            assert result.fidelity.mean is not None
