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
"""

from __future__ import annotations

import attrs

from ctxfold.kernel.errors import ConfigError

CNY_PER_USD = 7.10


@attrs.frozen
class Price:
    """USD per 1M tokens for cache-hit input, cache-miss input and output, with provenance.

    ``emulator_profile`` names the :data:`ctxfold.emulator.profiles.PROFILES` entry whose
    prefix-cache rules (unit, policy, minimum) bill the replayed requests.
    """

    name: str
    model: str
    hit: float
    miss: float
    output: float
    emulator_profile: str
    source: str
    date: str

    def cost(self, hit_tokens: int, miss_tokens: int, output_tokens: int) -> float:
        """The USD cost of one request (or a sum of requests)."""
        return (hit_tokens * self.hit + miss_tokens * self.miss
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
