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

from ctxfold import Config, Registry, ReplaySettings, replay_paths
from ctxfold.plugins.policies.peers import PEERS
from ctxfold.replay import DEFAULT_RESERVE_OUTPUT, replay_sessions
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


def test_langchain_fallback_summaries_count_as_summaries_unbilled(demo: Any) -> None:
    """Upstream langchain-ai/langchain#39261: with the default 4,000-token trim and no
    human message in the last 4,000 tokens, the summary is the fixed fallback text. It is a
    summary the middleware installed (counted), made without a model call (not billed)."""
    result = demo.policies["langchain-summarization"]
    assert not result.failed
    assert result.fallback_summaries > 0
    assert result.summaries >= result.fallback_summaries
    billed = sum(r.summary_calls for r in result.records)
    assert billed == result.summaries - result.fallback_summaries


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


def _setup(tmp_path: Path, summarizer: Any = None) -> Any:
    from ctxfold import PolicyOptions
    from ctxfold.plugins.estimators.heuristic import HeuristicEstimator
    from ctxfold.plugins.summarizers.extractive import ExtractiveSummarizer

    session = demo_session(rounds=80)
    return session, PolicyOptions(
        tools=session.tools, window=12_000, compact_ratio=0.8,
        estimator=HeuristicEstimator(), summarizer=summarizer or ExtractiveSummarizer(),
        workdir=tmp_path, session_name="demo", summary_tokens=1024)


class Recording:
    """The extractive summarizer, keeping every request it was given."""

    name = "extractive"

    def __init__(self) -> None:
        from ctxfold.plugins.summarizers.extractive import ExtractiveSummarizer

        self.inner = ExtractiveSummarizer()
        self.requests: list[Any] = []

    def summarize(self, request: Any) -> Any:
        self.requests.append(request)
        return self.inner.summarize(request)


@pytest.mark.parametrize("module,cls", [("pydantic_ai_harness", "PydanticAIHarness"),
                                        ("langchain", "LangChainSummarization")])
def test_peers_merge_their_previous_summary_and_show_tool_calls(tmp_path: Path, module: str,
                                                                cls: str) -> None:
    """The library's previous summary, in its own wrapper, reaches the summarizer as a
    summary to merge (not as the task statement), and tool calls are part of what it sees."""
    from ctxfold import Usage
    from ctxfold.kernel.summary import is_summary_message

    recording = Recording()
    session, setup = _setup(tmp_path, recording)
    policy = getattr(importlib.import_module(f"ctxfold.plugins.policies.peers.{module}"),
                     cls)(setup)
    for message in session.messages:
        if message.role == "assistant":
            policy.request()
            policy.observe_usage(Usage(prompt_tokens=9_000, completion_tokens=100))
        policy.observe(message)
    assert len(recording.requests) >= 2, "the library summarized at most once"
    later = recording.requests[1:]
    assert any(is_summary_message(m) for r in later for m in r.messages)
    assert any(m.tool_calls for r in recording.requests for m in r.messages)


def test_langchain_and_pydantic_receive_the_usage_of_each_request(tmp_path: Path) -> None:
    from langchain_core.messages import AIMessage

    from ctxfold import Message, Usage
    from ctxfold.plugins.policies.peers.langchain import LangChainSummarization
    from ctxfold.plugins.policies.peers.pydantic_ai_harness import PydanticAIHarness

    _session, setup = _setup(tmp_path)
    user, reply = Message(role="user", content="go"), Message(role="assistant", content="ok")
    lc = LangChainSummarization(setup)
    lc.observe(user)
    lc.request()
    lc.observe_usage(Usage(prompt_tokens=5_000, completion_tokens=40))
    lc.observe(reply)
    ai = [m for m in lc.pending if isinstance(m, AIMessage)][-1]
    assert ai.usage_metadata is not None and ai.usage_metadata["total_tokens"] == 5_040
    assert ai.response_metadata["model_provider"] == lc.model._get_ls_params()["ls_provider"]
    pa = PydanticAIHarness(setup)
    pa.observe(user)
    pa.request()
    pa.observe_usage(Usage(prompt_tokens=5_000, completion_tokens=40))
    pa.observe(reply)
    assert pa.run_history[-1].usage.input_tokens == 5_000
