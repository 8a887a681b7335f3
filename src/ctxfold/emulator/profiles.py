"""Provider profiles: window, cache policy, TTL and default output budget per provider.

Numbers come from ``/work/shared/research/providers.md`` (cited by section); where that file
says NOT FOUND the emulator picks a value and ``docs/emulator.md`` lists the assumption.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from ctxfold.kernel.errors import ConfigError

Wire = Literal["chat", "responses"]


@attrs.frozen
class Profile:
    """What the emulator imitates.

    ``wire``: ``chat`` (``/chat/completions``) or ``responses`` (``/responses``).
    ``usage_style``: ``deepseek`` | ``mimo`` | ``responses`` — the usage fields and where they
    appear in a stream. ``cache_policy``/``cache_unit``/``cache_min_tokens``/
    ``cache_interval_units`` configure :class:`ctxfold.emulator.cache.PrefixCache`.
    ``cache_thinking_output``: whether the end of a *thinking* reply (one with reasoning) is
    persisted as a unit. DeepSeek's reasoner does not: in the real transcripts its hits stop
    at the previous prompt although the reasoning is replayed and billed as prompt tokens.
    """

    name: str
    wire: Wire
    usage_style: Literal["deepseek", "mimo", "responses"]
    window: int
    model: str
    cache_unit: int
    cache_ttl: float
    cache_policy: Literal["boundaries", "all_units"] = "boundaries"
    cache_min_tokens: int = 0
    cache_interval_units: int = 0
    cache_thinking_output: bool = False

    def default_max_output(self, body: Mapping[str, Any]) -> int:
        """The output budget reserved when the request omits its max-token field."""
        if self.usage_style == "deepseek":
            # providers.md §1.2: 8K non-thinking, 64K thinking (default on), 128K at max effort.
            thinking = body.get("thinking")
            effort = str(body.get("reasoning_effort") or "high")
            if (isinstance(thinking, Mapping) and thinking.get("type") == "disabled") \
                    or effort == "none":
                return 8192
            return 131072 if effort in ("max", "ultra") else 65536
        if self.usage_style == "mimo":
            # providers.md §2.2: NOT FOUND officially; a reseller documents default 32768.
            return 32768
        # OpenAI's overflow message talks about the input only; reserve nothing by default.
        return 0


#: Built-in profiles by name.
PROFILES: dict[str, Profile] = {
    # providers.md §1.2 (1M context, errors report 1048576), §1.5 (units), §2 SPEC (24 h TTL).
    "deepseek": Profile(
        name="deepseek", wire="chat", usage_style="deepseek", window=1_048_576,
        model="deepseek-flash", cache_unit=64, cache_ttl=24 * 3600.0,
        cache_interval_units=256,
    ),
    # providers.md §2.2: v2.5 / v2.5-pro are priced up to 1M input; caching NOT FOUND
    # (§2.5) — DeepSeek-like 64-token units assumed.
    "mimo": Profile(
        name="mimo", wire="chat", usage_style="mimo", window=1_048_576,
        model="mimo-v2.5-pro", cache_unit=64, cache_ttl=24 * 3600.0,
        cache_interval_units=256,
    ),
    # providers.md §0.2: ≥1024 tokens, 128-token steps; SPEC §2 TTL 10 min. The context
    # window of a current model is not in providers.md: 400,000 (gpt-5 family) assumed.
    "responses": Profile(
        name="responses", wire="responses", usage_style="responses", window=400_000,
        model="gpt-5.5", cache_unit=128, cache_ttl=600.0, cache_policy="all_units",
        cache_min_tokens=1024,
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
