"""Providers end to end over real TCP: swapping by TOML, overflow recovery, cache accounting."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import attrs
import pytest

import ctxfold
from ctxfold import ContextManager, Message, Registry, load_config, open_session
from ctxfold.kernel.kinds import PROVIDER
from ctxfold.testing import EMULATOR_KEY_ENV

TASK = "Refactor the parser. You must keep the public API unchanged."


def run_session(cm: ContextManager, provider, turns: int, size: int = 300) -> list:
    cm.append(Message(role="system", content="You are a coding agent."),
              Message(role="user", content=TASK))
    usages = []
    for i in range(turns):
        usage = cm.complete(provider).usage
        version = cm.state.projection.projection_version if cm.state.projection else 0
        usages.append((version, usage))
        cm.append(Message(role="user", content=(f"observation {i}: all good\n") * size))
    return usages


@pytest.mark.parametrize("name", ["deepseek", "mimo", "responses"])
def test_same_session_through_each_provider_by_toml_only(
    name: str, tmp_path: Path, ctxfold_emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    emulator = ctxfold_emulator(name, window=24_000)
    monkeypatch.setenv(EMULATOR_KEY_ENV, "k-test")
    toml = tmp_path / "ctxfold.toml"
    toml.write_text(textwrap.dedent(f"""
        [agent]
        compact_ratio = 0.5

        [provider]
        name = "{name}"
        base_url = "{emulator.base_url}"
        api_key_env = "{EMULATOR_KEY_ENV}"
        context_window = 24000

        [estimator]
        name = "deepseek"

        [summarizer]
        name = "llm"

        [store]
        path = "{(tmp_path / 'sessions').as_posix()}"
    """))
    config = load_config(config_path=toml, cwd=tmp_path, env={}).config
    registry = Registry.from_config()
    provider = registry.create(PROVIDER, config.provider.name, config=config)
    cm = open_session("swap", config=config, registry=registry, provider=provider)
    usages = run_session(cm, provider, turns=12)
    paths = {r.path.rstrip("/").split("/")[-1] for r in emulator.requests}
    assert paths == ({"responses"} if name == "responses" else {"completions"})
    # The llm summarizer ran over HTTP (once per checkpoint) and installed a checkpoint.
    assert cm.summary_calls >= 1 and cm.state.projection is not None
    assert len(emulator.requests) == 12 + cm.summary_calls
    # Append-only turns before the checkpoint hit the cache on every request after the first.
    before = [u for version, u in usages if version == 0]
    assert len(before) >= 3
    # (the first request is under one 64-token cache unit, so the second cannot hit yet)
    assert all(u.cache_hit_tokens > 0 for u in before[2:])
    # The summary request replays the cached prefix: it hits too.
    summaries = [r for r in emulator.requests if "[ctxfold:summary-request]" in str(r.body)]
    assert summaries and all(r.cache_hit_tokens > 0 for r in summaries)


def test_overflow_recovery_one_summary_one_retry(
    tmp_path: Path, ctxfold_emulator, ctxfold_provider_config
) -> None:
    emulator = ctxfold_emulator("deepseek", window=6_000)
    # ctxfold believes the window is far larger, so only the provider's 400 reveals it.
    config = ctxfold_provider_config(emulator, context_window=200_000)
    registry = Registry.from_config()
    provider = registry.create(PROVIDER, "deepseek", config=config)
    # The fixture config summarizes offline (extractive): the emulator sees only the
    # overflowing request and the retry (tests/e2e/test_wire_bodies.py counts an llm summary).
    cm = open_session("overflow", config=config, registry=registry, provider=provider)
    cm.append(Message(role="system", content="You are a coding agent."),
              Message(role="user", content=TASK))
    for i in range(12):
        cm.append(Message(role="assistant", content=f"step {i}"),
                  Message(role="user", content=f"result {i}: " + "data " * 120))
    before = len(emulator.requests)
    response = cm.complete(provider)
    sent = emulator.requests[before:]
    statuses = [r.status for r in sent]
    assert statuses[0] == 400  # the overflow
    assert statuses.count(400) == 1
    assert len(sent) == 2  # the overflow and exactly one retry
    assert statuses[-1] == 200 and response.message.role == "assistant"
    assert cm.window == 6_000  # learned from the error body
    assert cm.state.projection is not None and cm.summary_calls <= 1


def test_checkpoint_misses_once_then_hits_and_cold_cache_misses(
    tmp_path: Path, ctxfold_emulator, ctxfold_provider_config
) -> None:
    now = [1_000_000.0]
    emulator = ctxfold_emulator("deepseek", window=20_000, clock=lambda: now[0])
    config = ctxfold_provider_config(emulator)

    config = attrs.evolve(config, agent=attrs.evolve(config.agent, compact_ratio=0.5),
                          summarizer=attrs.evolve(config.summarizer, name="extractive"))
    registry = Registry.from_config()
    provider = registry.create(PROVIDER, "deepseek", config=config)
    cm = open_session("cache", config=config, registry=registry)
    versions = []
    usages = []
    cm.append(Message(role="system", content="You are a coding agent. " * 20),
              Message(role="user", content=TASK))
    for i in range(14):
        usages.append(cm.complete(provider).usage)
        versions.append(cm.state.projection.projection_version if cm.state.projection else 0)
        cm.append(Message(role="user", content=(f"observation {i}\n") * 250))
    install = versions.index(1)
    assert all(u.cache_hit_tokens > 0 for u in usages[1:install])
    # The request right after the install misses beyond the pinned head ...
    assert usages[install].cache_hit_tokens < usages[install].prompt_tokens // 2
    # ... and the next one hits again.
    assert usages[install + 1].cache_hit_tokens > usages[install + 1].prompt_tokens // 2
    # A cold cache (TTL passed) misses.
    now[0] += 25 * 3600
    cold = cm.complete(provider).usage
    assert cold.cache_hit_tokens == 0 and cold.prompt_tokens > 0


@pytest.mark.parametrize("profile", ["deepseek", "mimo", "responses", "anthropic"])
def test_emulator_profile_swap_is_toml_only(profile: str, tmp_path: Path) -> None:
    """`[provider] name = "emulator"` starts the emulator itself: only the TOML changes."""
    toml = tmp_path / "ctxfold.toml"
    toml.write_text(textwrap.dedent(f"""
        [agent]
        compact_ratio = 0.5

        [provider]
        name = "emulator"
        profile = "{profile}"
        context_window = 24000

        [summarizer]
        name = "llm"

        [store]
        path = "{(tmp_path / 'sessions').as_posix()}"
    """))
    config = load_config(config_path=toml, cwd=tmp_path, env={}).config
    registry = Registry.from_config()
    provider = registry.create(PROVIDER, "emulator", config=config)
    try:
        cm = open_session("toml-only", config=config, registry=registry,
                                 provider=provider)
        usages = run_session(cm, provider, turns=10)
        assert provider.emulator.profile.name == profile
        assert cm.summary_calls >= 1 and cm.state.projection is not None
        assert any(u.cache_hit_tokens > 0 for _v, u in usages)
    finally:
        provider.close()


@pytest.mark.parametrize(("name", "key_env", "model", "window"), [
    ("deepseek", "DEEPSEEK_API_KEY", "deepseek-flash", 1_048_576),
    ("mimo", "MIMO_API_KEY", "mimo-v2.5-pro", 262_144),
    ("responses", "OPENAI_API_KEY", "gpt-5.5", 400_000),
    ("anthropic", "ANTHROPIC_API_KEY", "claude-sonnet-4-6", 200_000),
])
def test_naming_a_provider_is_enough(
    name: str, key_env: str, model: str, window: int, tmp_path: Path, ctxfold_emulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A TOML with only ``name`` and ``base_url``: that provider's own model, window, key
    variable and cache TTL, declared by its plugin; the trigger follows its window."""
    emulator = ctxfold_emulator(name)
    monkeypatch.setenv(key_env, "k-test")
    toml = tmp_path / "ctxfold.toml"
    toml.write_text(f'[provider]\nname = "{name}"\nbase_url = "{emulator.base_url}"\n'
                    f'[store]\npath = "{(tmp_path / "s").as_posix()}"\n')
    loaded = load_config(config_path=toml, cwd=tmp_path, env={})
    assert loaded.config.provider.model == model
    assert loaded.sources["provider.model"] == f"provider default ({name})"
    assert loaded.sources["provider.base_url"].startswith("project file")
    with ctxfold.create_provider(loaded) as provider:
        cm = ctxfold.open_session("named", config=loaded, provider=provider)
        assert cm.window == window and cm.trigger_tokens == int(window * 0.8)
        cm.append({"role": "user", "content": "hello"})
        cm.complete(provider)
    assert emulator.requests[-1].body["model"] == model
    explicit = load_config(config_path=toml, cwd=tmp_path,
                           env={"CTXFOLD_PROVIDER_MODEL": "my-model"})
    assert explicit.config.provider.model == "my-model"  # an explicit value wins
    assert explicit.sources["provider.model"] == "env CTXFOLD_PROVIDER_MODEL"


def test_the_async_face_over_tcp_checkpoints_and_keeps_the_prefix_stable(
    tmp_path: Path, ctxfold_emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``acomplete`` through httpx's async client: append-only requests extend each other
    byte for byte until the checkpoint, summaries come from an async callable."""
    import asyncio
    import json

    emulator = ctxfold_emulator("deepseek", window=24_000)
    monkeypatch.setenv("DEEPSEEK_API_KEY", "k-test")
    config = load_config(cwd=tmp_path, env={}, cli_overrides={
        "provider.name": "deepseek", "provider.base_url": emulator.base_url,
        "provider.context_window": "24000", "agent.compact_ratio": "0.5",
        "store.path": str(tmp_path / "s")}).config
    summaries: list[object] = []

    async def summarize(request) -> str:
        summaries.append(request)
        return "## Goal\n- refactor the parser"

    async def run() -> ContextManager:
        provider = ctxfold.create_provider(config)
        cm = ctxfold.open_session("async", config=config, summarize=summarize)
        cm.append(Message(role="system", content="You are a coding agent."),
                  Message(role="user", content=TASK))
        for i in range(12):
            await cm.acomplete(provider)
            cm.append(Message(role="user", content=f"observation {i}: all good\n" * 300))
        await provider.aclose()
        return cm

    cm = asyncio.run(run())
    assert summaries and cm.state.projection is not None
    bodies = [json.dumps(r.body["messages"], separators=(",", ":")) for r in emulator.requests]
    first_install = next(i for i, r in enumerate(emulator.requests)
                         if "compaction-summary" in json.dumps(r.body))
    for before, after in itertools.pairwise(bodies[:first_install]):
        assert after.startswith(before[:-1])  # the previous list, extended
    assert len(cm.canonical) == 2 + 12 * 2
