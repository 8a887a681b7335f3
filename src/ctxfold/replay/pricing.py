"""Price tables of the replay profiles (USD per 1M tokens) and the emulator cache behind each.

Every row names its public source and the date the price was read (docs/providers.md lists
the same figures). Prices move often (DeepSeek changed three times in 2026):
re-check before quoting a replay result as money.

* ``deepseek-flash`` / ``deepseek-v4-pro`` — https://api-docs.deepseek.com/quick_start/pricing,
  the prices from 2026-09-10 04:00 UTC (page checked 2026-11-15), **off-peak** prices. Peak hours
  (01:00–04:00 and 06:00–10:00 UTC on weekdays) cost exactly twice as much, so every ratio
  in a report is the same at peak.
* ``mimo`` — mimo-v2.5-pro after the 2026-05-27 price cut (secondary reports of
  https://mimo.mi.com pricing, in CNY: ¥0.025 hit, ¥3 miss, ¥6 output). No official USD price
  was found; converted at an assumed 7.10 CNY per USD.
* ``openai`` — gpt-5.5 (the emulator's ``responses`` model), from a secondary summary of the
  official pricing page (https://morphllm.com/openai-api-pricing, "as of June 2026": $5.00
  input, $0.50 cached input, $30.00 output). Verify on openai.com before quoting.
* ``anthropic-sonnet`` / ``anthropic-haiku`` — Claude Sonnet 4.6 and Claude Haiku 4.5 from
  https://platform.claude.com/docs/en/about-claude/pricing (read 2026-12-05): base input
  $3 / $1, 5-minute cache writes $3.75 / $1.25 (1.25×), cache hits $0.30 / $0.10 (0.1×),
  output $15 / $5. Billed with automatic caching
  (https://platform.claude.com/docs/en/build-with-claude/prompt-caching): a breakpoint on
  the end of the tools and system prompt and one moving with the newest message, 5-minute
  TTL never reached on the replay's frozen clock, so every uncached token of a prompt at or
  over the model's minimum (1,024 / 4,096 tokens) is written at the write price, a shorter
  prompt is billed at the base price. Newer models read the cache cheaper (Sonnet 5.5:
  0.05×), which makes a fold's rewrite dearer relative to a read.
"""

from __future__ import annotations

from typing import Literal

import attrs

from ctxfold.kernel.errors import ConfigError

CNY_PER_USD = 7.10


@attrs.frozen
class CacheRules:
    """Prefix-cache rules of a price profile whose provider has no emulator profile:
    :class:`ctxfold.emulator.cache.PrefixCache`'s ``policy``, ``unit`` and ``min_tokens``."""

    policy: Literal["boundaries", "all_units", "breakpoints"]
    unit: int
    min_tokens: int = 0


@attrs.frozen
class Price:
    """USD per 1M tokens for cache-hit input, cache-miss input and output, with provenance.

    ``emulator_profile`` names the :data:`ctxfold.emulator.profiles.PROFILES` entry whose
    prefix-cache rules (unit, policy, minimum) bill the replayed requests, unless ``cache``
    gives them; its context window is the replay's default unless ``window`` is set.
    ``write``: USD per 1M tokens written to the cache, for providers that bill writes
    (Anthropic); every uncached token of a cacheable prompt is then billed at ``write``
    instead of ``miss``.
    """

    name: str
    model: str
    hit: float
    miss: float
    output: float
    emulator_profile: str
    source: str
    date: str
    write: float | None = None
    cache: CacheRules | None = None
    window: int | None = None

    def miss_price(self, prompt_tokens: int) -> float:
        """USD per 1M uncached input tokens of a prompt of ``prompt_tokens``: the write price
        where writes are billed and the prompt is long enough to be cached, else ``miss``."""
        minimum = self.cache.min_tokens if self.cache else 0
        return self.write if self.write is not None and prompt_tokens >= minimum else self.miss

    @property
    def uncached(self) -> float:
        """USD per 1M uncached input tokens of a cacheable prompt (written to the cache where
        writes are billed): what re-sending a prefix after a fold costs."""
        return self.write if self.write is not None else self.miss

    @property
    def caches_replies(self) -> bool:
        """Whether a request's reply is cached with it (not under Anthropic's breakpoints:
        the next request writes it)."""
        return self.cache is None or self.cache.policy != "breakpoints"

    def cost(self, hit_tokens: int, miss_tokens: int, output_tokens: int) -> float:
        """The USD cost of one request (or a sum of requests), uncached input billed as
        written to the cache where the provider bills writes."""
        return (hit_tokens * self.hit + miss_tokens * self.uncached
                + output_tokens * self.output) / 1_000_000


PRICES: dict[str, Price] = {
    "deepseek-flash": Price(
        name="deepseek-flash", model="deepseek-flash (DeepSeek-V4.1-Flash-1017)",
        hit=0.003, miss=0.15, output=0.60, emulator_profile="deepseek",
        source="https://api-docs.deepseek.com/quick_start/pricing (checked 2026-11-15), "
               "off-peak; peak is 2x",
        date="2026-11-15",
    ),
    "deepseek-v4-pro": Price(
        name="deepseek-v4-pro", model="deepseek-v4-pro (DeepSeek-V4-Pro-0813)",
        hit=0.022, miss=0.66, output=1.98, emulator_profile="deepseek",
        source="https://api-docs.deepseek.com/quick_start/pricing (checked 2026-11-15), "
               "off-peak; peak is 2x",
        date="2026-11-15",
    ),
    "mimo": Price(
        name="mimo", model="mimo-v2.5-pro",
        hit=round(0.025 / CNY_PER_USD, 6), miss=round(3.0 / CNY_PER_USD, 6),
        output=round(6.0 / CNY_PER_USD, 6), emulator_profile="mimo",
        source="secondary reports of MiMo's 2026-05-27 price cut (CNY 0.025/3/6), "
               f"converted at an assumed {CNY_PER_USD} CNY per USD",
        date="2026-05-27",
    ),
    "openai": Price(
        name="openai", model="gpt-5.5",
        hit=0.50, miss=5.00, output=30.00, emulator_profile="responses",
        source="https://morphllm.com/openai-api-pricing summarising the official "
               "pricing page",
        date="2026-06",
    ),
    "anthropic-sonnet": Price(
        name="anthropic-sonnet", model="claude-sonnet-4-6",
        hit=0.30, miss=3.00, output=15.00, write=3.75,
        emulator_profile="responses",  # not read: ``cache`` and ``window`` are given
        cache=CacheRules(policy="breakpoints", unit=16, min_tokens=1024), window=200_000,
        source="https://platform.claude.com/docs/en/about-claude/pricing (read 2026-12-05), "
               "5-minute cache writes",
        date="2026-12-05",
    ),
    "anthropic-haiku": Price(
        name="anthropic-haiku", model="claude-haiku-4-5",
        hit=0.10, miss=1.00, output=5.00, write=1.25,
        emulator_profile="responses",  # not read: ``cache`` and ``window`` are given
        cache=CacheRules(policy="breakpoints", unit=16, min_tokens=4096), window=200_000,
        source="https://platform.claude.com/docs/en/about-claude/pricing (read 2026-12-05), "
               "5-minute cache writes",
        date="2026-12-05",
    ),
}

DEFAULT_PROFILE = "deepseek-flash"


def get_price(name: str) -> Price:
    """The price row of profile ``name``; unknown names list the choices."""
    try:
        return PRICES[name]
    except KeyError:
        raise ConfigError(
            f"unknown replay profile {name!r} (--profile); choose one of "
            f"{', '.join(sorted(PRICES))}"
        ) from None
