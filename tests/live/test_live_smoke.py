"""Live smoke: one short turn against each real provider. Needs API keys and the internet.

Marked ``live``: CI runs ``pytest -m "not live"``. Each test skips with the reason when its
key is absent. Run by hand: ``DEEPSEEK_API_KEY=... pytest -m live tests/live``.
"""

from __future__ import annotations

import os

import pytest

from ctxfold import ChatRequest, Config, Message, Registry
from ctxfold.kernel.config import ProviderConfig
from ctxfold.kernel.kinds import PROVIDER

pytestmark = pytest.mark.live

CASES = [
    ("deepseek", "DEEPSEEK_API_KEY", "deepseek-v4-flash"),
    ("mimo", "MIMO_API_KEY", "mimo-v2.5"),
    ("responses", "OPENAI_API_KEY", "gpt-5.5-mini"),
    ("anthropic", "ANTHROPIC_API_KEY", "claude-haiku-4-5"),
]


@pytest.mark.parametrize(("name", "key_env", "model"), CASES)
def test_one_short_turn_parses_usage(name: str, key_env: str, model: str) -> None:
    if not os.environ.get(key_env):
        pytest.skip(f"{key_env} is not set: live {name} smoke skipped")
    model = os.environ.get(f"CTXFOLD_LIVE_{name.upper()}_MODEL", model)
    config = Config(provider=ProviderConfig(name=name, model=model, api_key_env=key_env,
                                            max_retries=1, timeout_seconds=120))
    registry = Registry.from_config()
    provider = registry.create(PROVIDER, name, config=config)
    response = provider.complete(ChatRequest(
        messages=(Message(role="user", content="Reply with exactly: ok"),),
        model=model, max_output_tokens=64, effort="none",
    ))
    assert response.message.content.strip()
    assert response.usage.prompt_tokens > 0
    assert response.usage.completion_tokens > 0
    assert response.usage.cache_hit_tokens + response.usage.cache_miss_tokens in (
        0, response.usage.prompt_tokens)
