"""Measurement defects of the replay that favoured ctxfold (issue: an honest replay), each
pinned: summaries billed in full, the use_capability schema billed, one summary length for
all when asked, the originals' tool-output caps, reasoning alike, the headline against a
peer, a real summarizer behind a spend cap."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from tests.replay.test_runner import tiny_replay

from ctxfold import (
    USE_CAPABILITY_TOOL,
    Config,
    ImportedSession,
    Message,
    PolicyOptions,
    Registry,
    ReplaySettings,
    RequestShape,
    ToolCall,
)
from ctxfold.kernel.summary import is_summary_message, unwrap_summary
from ctxfold.plugins.policies.codex_like import codex_truncate
from ctxfold.plugins.policies.opencode_like import opencode_truncate
from ctxfold.plugins.summarizers.extractive import ExtractiveSummarizer
from ctxfold.replay import replay_sessions
from ctxfold.replay.demo import demo_session
from ctxfold.replay.live import SpendCapError
from ctxfold.replay.runner import build_policies


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry.from_config(load_entry_points=False)


def small_demo(rounds: int = 60) -> ImportedSession:
    return demo_session(rounds=rounds)


def _policies(registry: Registry, names: tuple[str, ...], tmp_path: Path, window: int,
              **setup: Any) -> dict[str, Any]:
    from ctxfold.plugins.estimators.heuristic import HeuristicEstimator

    session = small_demo()
    options = PolicyOptions(tools=session.tools, window=window, compact_ratio=0.8,
                            estimator=HeuristicEstimator(), summarizer=ExtractiveSummarizer(),
                            workdir=tmp_path, session_name="demo", **setup)
    return build_policies(names, registry, Config(), options)


def _first_fold(policy: Any, session: ImportedSession) -> Any:
    for message in session.messages:
        if message.role == "assistant":
            req = policy.request()
            if req.summaries:
                return req
        policy.observe(message)
    raise AssertionError("no fold happened")


def test_ctxfold_summaries_are_billed_in_full_facts_list_included(registry: Registry,
                                                                  tmp_path: Path) -> None:
    policy = _policies(registry, ("ctxfold",), tmp_path, 16_000,
                       summary_tokens=2048)["ctxfold"]
    repaired = 0
    for message in small_demo(150).messages:
        if message.role == "assistant":
            req = policy.request()
            if req.summaries:
                installed = next(m for m in req.messages if is_summary_message(m))
                assert req.summaries[-1].text == unwrap_summary(installed)  # billed in full
                repaired += "## Facts kept verbatim" in installed.content
        policy.observe(message)
    assert repaired  # the check appended facts at least once, and they were billed


def test_ctxfold_offers_and_bills_the_use_capability_tool(registry: Registry,
                                                         tmp_path: Path) -> None:
    """As a host deploys it: the tool rides along once the view holds something to look up
    (a checkpoint, a bounded result), and every such request bills its schema."""
    from tests.replay.test_runner import TemplateEstimator

    messages = [Message(role="system", content="sys"), Message(role="user", content="hi"),
                Message(role="assistant", content="ok")]
    result = tiny_replay(registry, messages, names=("ctxfold", "append-only"))
    estimator = TemplateEstimator()
    first = result.policies["ctxfold"].records[0]
    assert first.prompt_tokens == estimator.estimate(RequestShape(messages[:2], []))
    assert not result.policies["ctxfold"].offers_search  # nothing to look up yet
    assert not result.policies["append-only"].offers_search
    policy = _policies(registry, ("ctxfold",), tmp_path, 16_000)["ctxfold"]
    folded = _first_fold(policy, small_demo())
    assert USE_CAPABILITY_TOOL in (folded.tools or ())


def test_equal_length_applies_to_every_policy_ctxfold_included(registry: Registry,
                                                               tmp_path: Path) -> None:
    policies = _policies(registry, ("ctxfold", "codex-like"), tmp_path, 16_000,
                         summary_tokens=700, equal_summary_length=True)
    for name, policy in policies.items():
        call = _first_fold(policy, small_demo()).summaries[0]
        assert call.request.target_tokens == 700, name
        instruction = call.request.messages[-1].content
        assert "- Length: about 700 tokens." in instruction or name != "ctxfold", instruction


def test_own_length_keeps_ctxfold_s_ask_and_gives_others_the_default(
        registry: Registry, tmp_path: Path) -> None:
    policies = _policies(registry, ("ctxfold", "codex-like"), tmp_path, 16_000,
                         summary_tokens=2048)
    lengths = {n: _first_fold(p, small_demo()).summaries[0].request.target_tokens
               for n, p in policies.items()}
    assert lengths == {"ctxfold": 512, "codex-like": 2048}


def test_codex_and_opencode_bound_tool_outputs_as_their_originals_do() -> None:
    lines = "\n".join(f"line {i:05d} " + "x" * 20 for i in range(3000))
    codex = codex_truncate(lines)
    assert len(codex.encode()) <= 10 * 1024 + 64
    assert codex.startswith("line 00000") and codex.endswith(lines[-30:])
    assert "omitted" in codex
    assert codex_truncate("short") == "short"
    opencode = opencode_truncate(lines)
    kept = opencode.split("\n\n...")[0].split("\n")
    assert len(kept) <= 2000 and len("\n".join(kept).encode()) <= 50 * 1024
    assert "truncated..." in opencode and "Full output saved to" in opencode
    assert opencode_truncate("short") == "short"


def test_the_like_policies_send_the_bounded_output(registry: Registry, tmp_path: Path) -> None:
    big = "\n".join(f"row {i}" for i in range(5000))
    messages = [Message(role="user", content="go"),
                Message(role="assistant", content="", tool_calls=(
                    ToolCall(id="c1", name="bash", arguments='{"command": "seq"}'),)),
                Message(role="tool", content=big, tool_call_id="c1", name="bash"),
                Message(role="assistant", content="done")]
    policies = _policies(registry, ("codex-like", "opencode-like", "append-only"), tmp_path,
                         200_000)
    for policy in policies.values():
        for message in messages[:3]:
            policy.observe(message)
    sent = {n: next(m for m in p.request().messages if m.role == "tool").content
            for n, p in policies.items()}
    assert sent["append-only"] == big
    assert sent["codex-like"] == codex_truncate(big) != big
    assert sent["opencode-like"].startswith(opencode_truncate(big)[:50])
    assert "truncated..." in sent["opencode-like"]
    for policy in policies.values():
        assert policy.canonical()[2].content == big  # the canonical history keeps it whole


def test_earlier_reasoning_is_billed_alike_for_every_policy(registry: Registry) -> None:
    from tests.replay.test_runner import TemplateEstimator

    thought = "Let me think about this at length. " * 40
    messages = [Message(role="user", content="hi"),
                Message(role="assistant", content="ok", reasoning_content=thought),
                Message(role="user", content="more"), Message(role="assistant", content="ok2")]
    result = tiny_replay(registry, messages, names=("append-only",))
    second = result.policies["append-only"].records[1]
    without = [messages[0], Message(role="assistant", content="ok"), messages[2]]
    assert second.prompt_tokens == TemplateEstimator().estimate(RequestShape(without, []))


def test_the_headline_compares_ctxfold_with_a_peer_never_its_own_variant(
        registry: Registry) -> None:
    from ctxfold.replay.report_text import cheapest_note, headline, print_report
    from ctxfold.replay.results import paired, totals

    settings = ReplaySettings(window=16_000,
                              policies=("ctxfold", "ctxfold-plain", "codex-like"))
    sessions = replay_sessions([small_demo()], settings, registry=registry)
    lead = headline(sessions)
    assert lead.startswith("ctxfold vs its nearest peer, codex-like,")
    assert "continuation facts" in lead and "far facts" in lead and "needles" in lead
    note = cheapest_note(totals(sessions), paired(sessions))
    assert "ctxfold-plain" not in note
    out = io.StringIO()
    print_report(sessions, profile="deepseek-flash", window=16_000, file=out)
    assert out.getvalue().startswith("ctxfold vs its nearest peer")


def test_a_real_summarizer_writes_every_policy_s_summaries(registry: Registry,
                                                          monkeypatch: Any) -> None:
    from ctxfold.replay import live as live_module

    sent: list[Any] = []
    original = live_module.MeteredProvider.complete

    def complete(self: Any, request: Any) -> Any:
        sent.append(request)
        return original(self, request)

    monkeypatch.setattr(live_module.MeteredProvider, "complete", complete)
    settings = ReplaySettings(window=16_000, policies=("ctxfold", "codex-like"),
                              summarizer_provider="emulator", max_usd=5.0)
    live = replay_sessions([small_demo()], settings, registry=registry)
    summaries = 0
    for name in ("ctxfold", "codex-like"):
        result = live[0].policies[name]
        assert result.summaries > 0 and not result.failed, (name, result.failure)
        summaries += result.summaries
    # Every summary of every policy went to the provider, once, with effort none.
    assert len(sent) == summaries
    assert all(r.effort == "none" for r in sent)


def test_the_spend_cap_stops_a_real_summarizer(registry: Registry) -> None:
    settings = ReplaySettings(window=16_000, policies=("codex-like",),
                              summarizer_provider="emulator", max_usd=0.0001)
    with pytest.raises(SpendCapError, match="--max-usd"):
        replay_sessions([small_demo()], settings, registry=registry)
