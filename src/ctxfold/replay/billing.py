"""How a replayed request is billed: one fair cost model for every policy.

* prompt tokens: the configured estimator (default ``deepseek``, the exact tokenizer);
* cache hits/misses: the emulator's prefix cache (:class:`ctxfold.emulator.cache.PrefixCache`
  with the rules of the profile's provider), one cache per policy, on a frozen clock (a replay
  has no real timing, so no entry expires). Where the provider bills cache writes
  (Anthropic), uncached input of a cacheable prompt is billed at the write price. The
  request is serialized with the emulator's chat template and the recorded assistant
  message is the reply, so its output enters the next request's prefix exactly as the
  provider sees it. The hit share of the emulator's token
  sequence is applied to the estimator's prompt count;
* output tokens: the reply's tokens in the same template (reasoning, content, tool calls);
* summary requests are requests like any other: prompt through the same cache, output billed.

Every request of every policy, summary requests included, must fit the same input budget
(window minus the output reservation); one that does not is an overflow of that policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from ctxfold.kernel.contracts import Estimator
from ctxfold.kernel.types import Message, RequestShape, ToolSchema
from ctxfold.replay.pricing import Price


@attrs.frozen
class Bill:
    """One request: prompt tokens, the cached part, output tokens and the USD of each part."""

    prompt: int
    hit: int
    output: int
    hit_usd: float
    miss_usd: float
    output_usd: float

    @property
    def miss(self) -> int:
        return self.prompt - self.hit

    @property
    def cost_usd(self) -> float:
        return self.hit_usd + self.miss_usd + self.output_usd


#: The parts of a policy's cost, in report order (the JSON keys of ``cost_breakdown``).
BREAKDOWN = ("main_hit_usd", "main_miss_usd", "main_output_usd", "summary_input_usd",
             "summary_output_usd")


@attrs.define
class CostBreakdown:
    """A policy's cost by part: main requests' cached input, uncached input and output, then
    summary requests' input (cached or not) and output."""

    main_hit_usd: float = 0.0
    main_miss_usd: float = 0.0
    main_output_usd: float = 0.0
    summary_input_usd: float = 0.0
    summary_output_usd: float = 0.0

    def add_main(self, bill: Bill) -> None:
        self.main_hit_usd += bill.hit_usd
        self.main_miss_usd += bill.miss_usd
        self.main_output_usd += bill.output_usd

    def add_summary(self, bill: Bill) -> None:
        self.summary_input_usd += bill.hit_usd + bill.miss_usd
        self.summary_output_usd += bill.output_usd

    def add(self, other: CostBreakdown) -> None:
        for name in BREAKDOWN:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict[str, float]:
        return {name: round(getattr(self, name), 8) for name in BREAKDOWN}


@attrs.define
class Biller:
    """Bills requests against one policy's prefix cache."""

    estimator: Estimator
    tokens: Any  # ctxfold.emulator.tokens.TokenSource
    cache: Any  # ctxfold.emulator.cache.PrefixCache
    price: Price
    persist_thinking_output: bool = False

    def bill(self, messages: Sequence[Message], tools: Sequence[ToolSchema],
             reply: Message) -> Bill:
        """The bill of one request answered by ``reply`` (its reply enters the cache)."""
        from ctxfold.emulator.tokens import assistant_body, encode_segments, request_segments

        ids = encode_segments(self.tokens, request_segments(messages, tools))
        out_ids = encode_segments(self.tokens, [assistant_body(reply)])
        # DeepSeek's reasoner does not persist the end of a thinking reply (emulator profile).
        persist = not reply.reasoning_content or self.persist_thinking_output
        breakpoints = (self._stable_end(messages, tools),) if (
            getattr(self.cache, "policy", "") == "breakpoints") else ()
        result = self.cache.account("replay", ids, out_ids if persist else (), breakpoints)
        prompt = self.estimator.estimate(RequestShape(list(messages), list(tools)))
        hit = min(prompt, round(prompt * result.hit_tokens / len(ids))) if ids else 0
        output = len(out_ids)
        p = self.price
        return Bill(prompt, hit, output, hit * p.hit / 1e6,
                    (prompt - hit) * p.miss_price(prompt) / 1e6, output * p.output / 1e6)

    def _stable_end(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> int:
        """Where the tools and the leading system messages end: Anthropic's fixed breakpoint
        (the other one moves with the newest message, the end of the input)."""
        from ctxfold.emulator.tokens import encode_segments, request_segments

        lead = 0
        while lead < len(messages) and messages[lead].role == "system":
            lead += 1
        return len(encode_segments(self.tokens, request_segments(messages[:lead], tools)[:-1]))


def make_cache(price: Price) -> tuple[Any, bool]:
    """A fresh prefix cache with the rules of ``price``'s emulator profile, on a frozen clock."""
    from ctxfold.emulator.cache import PrefixCache
    from ctxfold.emulator.profiles import get_profile

    if price.cache is not None:
        rules = price.cache
        return PrefixCache(unit=rules.unit, policy=rules.policy, min_tokens=rules.min_tokens,
                           clock=lambda: 0.0), False
    profile = get_profile(price.emulator_profile)
    cache = PrefixCache(unit=profile.cache_unit, ttl=profile.cache_ttl,
                        policy=profile.cache_policy, min_tokens=profile.cache_min_tokens,
                        interval_units=profile.cache_interval_units, clock=lambda: 0.0)
    return cache, profile.cache_thinking_output


def token_source_for(estimator: Estimator) -> Any:
    """The emulator token source matching ``estimator``: the DeepSeek tokenizer for the
    ``deepseek`` estimator, else the estimator's own text counter (message-granular)."""
    from ctxfold.emulator.tokens import token_source

    if getattr(estimator, "name", "") == "deepseek" or not hasattr(estimator, "count_text"):
        return token_source(None)
    return token_source(estimator.count_text)


def unlimited_cost(messages: Sequence[Message], tools: Sequence[ToolSchema],
                   estimator: Estimator, tokens: Any, price: Price) -> float:
    """The ``unlimited`` reference: append-only with an unlimited window and a perfect cache,
    i.e. the cost of keeping everything. Every prompt token new to the conversation is paid
    once at the miss price, every resent token (the previous prompt and its reply) at the hit
    price, every reply at the output price. Not a lower bound: a policy that sends less pays
    less, and what it dropped shows in its fidelity."""
    from ctxfold.emulator.tokens import assistant_body, encode_segments

    hits = misses = outputs = 0
    reusable = 0  # tokens of the previous request plus its reply
    for i, message in enumerate(messages):
        if message.role != "assistant":
            continue
        prompt = estimator.estimate(RequestShape(list(messages[:i]), list(tools)))
        new = max(0, prompt - reusable)
        misses += new
        hits += prompt - new
        output = len(encode_segments(tokens, [assistant_body(message)]))
        outputs += output
        reusable = prompt + (output if price.caches_replies else 0)
    return price.cost(hits, misses, outputs)
