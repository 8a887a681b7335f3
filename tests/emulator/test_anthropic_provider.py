"""ctxfold's ``anthropic`` provider against the emulator's ``anthropic`` profile: the
breakpoints ctxfold places are accounted as Anthropic would, so the share of input read
from the cache and the writes can be measured from the server side (issue 28, item 2)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from tests.conftest import make_config

from ctxfold import Config, Message, Registry, open_session
from ctxfold.kernel.config import ProviderConfig
from ctxfold.kernel.kinds import PROVIDER

pytest.importorskip("ctxfold.plugins.providers.anthropic")

TASK = "Fix the failing test in src/app/util.py; keep the public API."


def session_config(tmp_path: Path, window: int, summarizer: str) -> Config:
    config = make_config(tmp_path, window=window, ratio=0.5)
    return attrs.evolve(
        config, summarizer=attrs.evolve(config.summarizer, name=summarizer),
        provider=ProviderConfig(name="emulator", profile="anthropic", context_window=window))


@pytest.mark.parametrize(("window", "summarizer", "checkpoints"), [
    (60_000, "extractive", 0),  # append-only: no checkpoint
    (16_000, "llm", 2),  # two checkpoints, each summary asked over the wire
])
def test_provider_breakpoints_as_the_emulator_bills_them(
        tmp_path: Path, window: int, summarizer: str, checkpoints: int) -> None:
    from ctxfold import EmulatorOptions, ProviderOptions

    config = session_config(tmp_path, window, summarizer)
    registry = Registry.from_config()
    provider = registry.create(PROVIDER, "emulator", config=config, options=ProviderOptions(
        plugin=EmulatorOptions(counter=lambda text: len(text) // 4)))
    try:
        cm = open_session("anthropic-cache", config=config, registry=registry,
                          provider=provider)
        cm.append(Message(role="system", content="You are a coding agent. " * 200),
                  Message(role="user", content=TASK))
        for i in range(24):
            cm.complete(provider)
            cm.append(Message(role="user", content=f"observation {i}: all good\n" * 120))
        records = list(provider.emulator.requests)
    finally:
        provider.close()
    assert cm.summary_calls == checkpoints
    assert records and all(r.status == 200 and r.path == "/v1/messages" for r in records)
    for r in records:
        usage = r.usage
        assert usage is not None
        # Anthropic's identity: the three parts make the prompt.
        assert (usage["input_tokens"] + usage["cache_creation_input_tokens"]
                + usage["cache_read_input_tokens"]) == r.prompt_tokens
        assert sum(1 for block in _blocks(r.body) if block.get("cache_control")) <= 4
    # Every request reads what the one before left in the cache, except the first and, at
    # most, the first after each checkpoint (its new prefix has not been written yet).
    misses = [r.index for r in records if r.cache_hit_tokens == 0]
    assert misses[0] == 0 and len(misses) <= 1 + checkpoints
    read = sum(r.cache_hit_tokens for r in records)
    prompt = sum(r.prompt_tokens for r in records)
    assert read / prompt > 0.6


def _blocks(body: object) -> list[dict[str, object]]:
    """Every block a request could mark: tools, system blocks, message content blocks."""
    assert isinstance(body, dict)
    out: list[dict[str, object]] = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    system = body.get("system")
    if isinstance(system, list):
        out.extend(b for b in system if isinstance(b, dict))
    for m in body.get("messages") or []:
        if isinstance(m.get("content"), list):
            out.extend(b for b in m["content"] if isinstance(b, dict))
    return out
