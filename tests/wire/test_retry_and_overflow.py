"""Issue 14 item 11 end to end (provider plugin → HTTP → loopback emulator → engine): a
``Retry-After`` beyond the cap fails at once and says so, a stream dropped before any output is
retried, and overflow recovery works when the overflow error carries no numbers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import attrs
import pytest

from ctxfold import (
    CompactionRequiredError,
    Fault,
    Message,
    ProviderOptions,
    RateLimitError,
    Registry,
    ReplySpec,
    ToolCall,
    open_session,
)
from ctxfold.kernel.config import AgentConfig, SummarizerConfig
from ctxfold.kernel.kinds import PROVIDER


def session(config, *, summarize_with_provider: bool = False, **options):
    registry = Registry.from_config()
    provider = registry.create(PROVIDER, config.provider.name, config=config,
                               options=ProviderOptions(**options))
    extra = {"provider": provider} if summarize_with_provider else {}
    cm = open_session("wire", config=config, registry=registry, **extra)
    cm.append(Message(role="system", content="You are a coding agent."),
              Message(role="user", content="Summarize the repository."))
    return cm, provider


def transcript(config) -> bytes:
    return (Path(config.store.path) / "wire.jsonl").read_bytes()


@pytest.mark.parametrize("face", ["sync", "async"])
def test_retry_after_beyond_the_cap_fails_at_once_saying_so(
    face, ctxfold_emulator, ctxfold_provider_config
) -> None:
    emulator = ctxfold_emulator("deepseek", faults=[Fault("rate_limit", at=0, retry_after=120)])
    config = ctxfold_provider_config(emulator, max_retries=2)
    slept: list[float] = []
    cm, provider = session(config, sleep=slept.append)
    before = transcript(config)
    with pytest.raises(RateLimitError, match=r"asked to wait 120s .*not retried") as info:
        cm.complete(provider) if face == "sync" else asyncio.run(cm.acomplete(provider))
    assert info.value.retry_after == 120.0
    assert [r.status for r in emulator.requests] == [429] and slept == []
    assert transcript(config) == before


@pytest.mark.parametrize("profile", ["deepseek", "mimo", "responses"])
@pytest.mark.parametrize("after_events", [0, 1])  # nothing, or only the opening event
@pytest.mark.parametrize("face", ["sync", "async"])
def test_stream_dropped_before_any_output_is_retried(
    face, profile, after_events, ctxfold_emulator, ctxfold_provider_config
) -> None:
    # The dropped request takes the first scripted reply; the retry gets the second.
    emulator = ctxfold_emulator(profile, script=[ReplySpec(text="lost"),
                                                 ReplySpec(text="all done")],
                                faults=[Fault("drop", at=0, after_events=after_events)])
    config = ctxfold_provider_config(emulator, max_retries=2)
    slept: list[float] = []
    cm, provider = session(config, sleep=slept.append)
    response = cm.complete(provider) if face == "sync" else asyncio.run(cm.acomplete(provider))
    assert response.message.content == "all done" and not response.message.partial
    assert len(emulator.requests) == 2 and len(slept) == 1
    assert [m.role for m in cm.canonical] == ["system", "user", "assistant"]
    assert cm.canonical[-1].content == "all done"


def grow(cm, rounds: int = 40) -> None:
    for i in range(rounds):
        cm.append(Message(role="assistant", content=f"step {i}",
                          tool_calls=(ToolCall(id=f"c{i}", name="bash", arguments="{}"),)),
                  Message(role="tool", content=f"output line {i} " * 140, tool_call_id=f"c{i}",
                          name="bash"))


@pytest.mark.parametrize("summarizer", ["llm", "extractive"])
def test_overflow_without_numbers_recovers_when_the_real_window_is_much_smaller(
    summarizer, ctxfold_emulator, ctxfold_provider_config
) -> None:
    # The Responses error says only "context_length_exceeded". The session (~21.7K estimated
    # tokens, below the 24K trigger of the configured 30K window) is sent to a model whose
    # real window is 16K: the first request, the summary request and the retry all must fit.
    emulator = ctxfold_emulator("responses", window=16_000, counter=lambda t: max(1, len(t) // 4),
                                script=[ReplySpec(text="## Goal\n- fix it"),
                                        ReplySpec(text="fixed")])
    config = ctxfold_provider_config(emulator, context_window=30_000, max_retries=0)
    config = attrs.evolve(config, agent=AgentConfig(compact_ratio=0.8),
                          summarizer=SummarizerConfig(name=summarizer))
    cm, provider = session(config, summarize_with_provider=True)
    grow(cm)
    estimate = cm.estimate()
    assert 16_000 < estimate < cm.trigger_tokens
    response = cm.complete(provider)
    assert cm.canonical[-1].content == response.message.content and response.message.content
    statuses = [r.status for r in emulator.requests]
    assert statuses == ([400, 200, 200] if summarizer == "llm" else [400, 200])
    assert cm.state.projection is not None  # one overflow checkpoint, then the one retry
    assert cm.window < estimate


@pytest.mark.parametrize("profile", ["deepseek", "mimo"])
def test_an_overflow_of_the_output_reservation_is_retried_with_the_output_clipped(
    profile, ctxfold_emulator, ctxfold_provider_config
) -> None:
    # The real window (6,000) is far below the configured one; the prompt is tiny, so there
    # is nothing to fold: the reserved output overflowed, and one clipped retry must answer.
    emulator = ctxfold_emulator(profile, window=6_000)
    config = ctxfold_provider_config(emulator, context_window=30_000)
    cm, provider = session(config)
    response = cm.complete(provider)
    assert response.message.role == "assistant"
    assert [r.status for r in emulator.requests] == [400, 200]
    assert cm.window == 6_000


def test_without_numbers_an_output_overflow_shrinks_the_assumed_window_until_it_fits(
    ctxfold_emulator, ctxfold_provider_config
) -> None:
    # Responses says only "context window exceeded": what was rejected is the prompt plus the
    # output it reserved, so the assumed window shrinks from the whole request (not from the
    # tiny prompt, which left every later turn failing), and a later turn succeeds.
    emulator = ctxfold_emulator("responses", window=12_000)
    config = ctxfold_provider_config(emulator, context_window=30_000)
    cm, provider = session(config)
    windows, answered = [], 0
    for _ in range(4):
        try:
            cm.complete(provider)
            answered += 1
        except CompactionRequiredError as exc:
            assert "assumed" in str(exc) and "context_window" in str(exc)
        windows.append(cm.window)
        cm.append(Message(role="user", content="again"))
    assert answered >= 2 and windows[-1] < 12_000
    assert windows == sorted(windows, reverse=True) and windows[0] > 1_024
