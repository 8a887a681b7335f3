"""Provider profiles: window, cache policy, TTL and default output budget per provider.

The model, the window and the cache TTL are what the provider plugin declares
(:data:`PROVIDER_DEFAULTS`); the cache policy and units follow the providers' public docs
(DeepSeek https://api-docs.deepseek.com/guides/kv_cache, OpenAI
https://platform.openai.com/docs/guides/prompt-caching, Anthropic
https://platform.claude.com/docs/en/build-with-claude/prompt-caching). Where nothing is
published the emulator picks a value and ``docs/emulator.md`` lists the assumption.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from ctxfold.kernel.errors import ConfigError
from ctxfold.kernel.kinds import ProviderDefaults
from ctxfold.plugins.providers import anthropic, deepseek, mimo, responses

#: What each imitated provider's plugin declares (model, window, cache TTL, output budget).
PROVIDER_DEFAULTS: dict[str, ProviderDefaults] = {
    "deepseek": deepseek.DEFAULTS,
    "mimo": mimo.DEFAULTS,
    "responses": responses.DEFAULTS,
    "anthropic": anthropic.DEFAULTS,
}

Wire = Literal["chat", "responses", "anthropic"]


@attrs.frozen
class Profile:
    """What the emulator imitates.

    ``wire``: ``chat`` (``/chat/completions``), ``responses`` (``/responses``) or
    ``anthropic`` (``/v1/messages``).
    ``usage_style``: ``deepseek`` | ``mimo`` | ``responses`` | ``anthropic`` — the usage fields
    and where they appear in a stream. ``cache_policy``/``cache_unit``/``cache_min_tokens``/
    ``cache_interval_units`` configure :class:`ctxfold.emulator.cache.PrefixCache`; with the
    ``anthropic`` wire the cache is block-granular (``cache_unit`` unused),
    ``cache_min_tokens`` is the model's minimum cacheable prefix, ``cache_ttl`` the default
    (5 min) TTL and ``cache_lookback_blocks`` how far a breakpoint looks back for an earlier
    entry. ``max_output``: the model's largest ``max_tokens`` (0 = no limit checked).
    ``cache_thinking_output``: whether the end of a *thinking* reply (one with reasoning) is
    persisted as a unit. DeepSeek's reasoner does not: in the real transcripts its hits stop
    at the previous prompt although the reasoning is replayed and billed as prompt tokens.
    """

    name: str
    wire: Wire
    usage_style: Literal["deepseek", "mimo", "responses", "anthropic"]
    window: int
    model: str
    cache_unit: int
    cache_ttl: float
    cache_policy: Literal["boundaries", "all_units", "breakpoints"] = "boundaries"
    cache_min_tokens: int = 0
    cache_interval_units: int = 0
    cache_thinking_output: bool = False
    cache_lookback_blocks: int = 20
    max_output: int = 0

    def default_max_output(self, body: Mapping[str, Any]) -> int:
        """The output budget reserved when the request omits its max-token field."""
        if self.usage_style == "deepseek":
            # The server's own default (what the plugin declares): 8K non-thinking, 64K
            # thinking (default on), 128K at max effort.
            thinking = body.get("thinking")
            effort = str(body.get("reasoning_effort") or "high")
            if isinstance(thinking, Mapping) and thinking.get("type") == "disabled":
                effort = "none"
            return deepseek.server_default_max_tokens("max" if effort == "ultra" else effort)
        if self.usage_style == "mimo":
            # Not documented officially; a reseller documents a default of 32768.
            return 32768
        # OpenAI's overflow message talks about the input only; reserve nothing by default.
        return 0


def _declared(name: str) -> dict[str, Any]:
    d = PROVIDER_DEFAULTS[name]
    return {"window": d.context_window, "model": d.model,
            "cache_ttl": d.cache_ttl_minutes * 60.0}


#: Built-in profiles by name.
PROFILES: dict[str, Profile] = {
    # DeepSeek: 64-token units at request boundaries plus fixed intervals (kv_cache guide).
    "deepseek": Profile(
        name="deepseek", wire="chat", usage_style="deepseek", **_declared("deepseek"),
        cache_unit=64, cache_interval_units=256,
    ),
    # MiMo: caching is not documented — DeepSeek-like 64-token units assumed.
    "mimo": Profile(
        name="mimo", wire="chat", usage_style="mimo", **_declared("mimo"),
        cache_unit=64, cache_interval_units=256,
    ),
    # OpenAI: prompts of >= 1024 tokens, 128-token steps.
    "responses": Profile(
        name="responses", wire="responses", usage_style="responses",
        **_declared("responses"), cache_unit=128, cache_policy="all_units",
        cache_min_tokens=1024,
    ),
    # Anthropic Messages: explicit cache_control breakpoints, the model's minimum cacheable
    # prefix (1,024 for Sonnet-class models), 5 min default TTL, 20-block lookback
    # (prompt-caching guide); the largest max_tokens the provider declares (64K).
    "anthropic": Profile(
        name="anthropic", wire="anthropic", usage_style="anthropic", **_declared("anthropic"),
        cache_unit=1, cache_policy="breakpoints",
        cache_min_tokens=anthropic.cache_minimum(anthropic.DEFAULTS.model),
        max_output=anthropic.MAX_OUTPUT,
    ),
}


def get_profile(name: str | Profile, window: int | None = None) -> Profile:
    """Resolve a profile by name (or pass one through), optionally overriding its window."""
    if isinstance(name, Profile):
        profile = name
    else:
        try:
            profile = PROFILES[name]
        except KeyError:
            raise ConfigError(
                f"unknown emulator profile {name!r}; choose one of {', '.join(sorted(PROFILES))}"
            ) from None
    if window is not None:
        if window <= 0:
            raise ConfigError(f"emulator window must be a positive token count, got {window}")
        profile = attrs.evolve(profile, window=int(window))
    return profile
