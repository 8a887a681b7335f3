"""Prefix-cache accounting: which leading tokens of a request a provider would bill as hits.

Prefixes are identified by a hash chain over whole cache units: ``h_k = H(h_{k-1} ||
ids[(k-1)·u : k·u])``. A stored prefix is one chain value, so a lookup walks the request's
chain once (O(length / unit)) and picks the longest stored value.

Two policies (see ``docs/emulator.md``):

* ``boundaries`` (DeepSeek, and MiMo by assumption) — the DeepSeek KV-cache guide
  (providers.md §1.5): units are persisted at the end of each request's input and at the end
  of its output (input + output, the prefix the next request replays), at fixed intervals, and
  where a common prefix with an earlier request is detected (persisted *after* the request
  that revealed it, so "A+B then A+C" misses and a third "A+D" hits A). A request hits the
  longest persisted prefix, rounded down to whole units (64 tokens: the 2024 unit, which the
  real transcripts confirm).
* ``all_units`` (OpenAI) — every unit boundary of every input is cached; hits count only from
  ``min_tokens`` (1024) in ``unit`` (128) steps.
* ``breakpoints`` (Anthropic's automatic caching, used by the replay's Anthropic price
  profiles) — only the end of each request's input and the ``breakpoints`` a request names
  (the end of its tools and system prompt) are cached; nothing of the reply is. A request
  hits the longest cached prefix if it is at least ``min_tokens`` long. See
  https://platform.claude.com/docs/en/build-with-claude/prompt-caching ("automatic caching":
  the breakpoint moves to the last block as the conversation grows).

Entries expire ``ttl`` seconds after their last use (a hit or a re-store refreshes them).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Sequence
from typing import Literal

import attrs

Policy = Literal["boundaries", "all_units", "breakpoints"]


_ROOT = hashlib.blake2b(b"ctxfold-emulator", digest_size=16).digest()


def unit_chain(ids: Sequence[int], unit: int, start: bytes = _ROOT) -> list[bytes]:
    """The hash chain of ``ids`` over whole units: element ``k-1`` identifies ``ids[:k·unit]``.

    ``start`` continues an existing chain (its last element), so extending a prefix costs
    only the new units.
    """
    chain: list[bytes] = []
    previous = start
    for pos in range(0, len(ids) - unit + 1, unit):
        block = array("I", (i & 0xFFFFFFFF for i in ids[pos:pos + unit])).tobytes()
        previous = hashlib.blake2b(previous + block, digest_size=16).digest()
        chain.append(previous)
    return chain


@attrs.frozen
class CacheResult:
    """The accounting of one request: ``hit + miss == prompt``."""

    prompt_tokens: int
    hit_tokens: int

    @property
    def miss_tokens(self) -> int:
        return self.prompt_tokens - self.hit_tokens


@attrs.define
class PrefixCache:
    """Persisted prefixes per scope, with last-use times for TTL expiry.

    ``interval_units``: with the ``boundaries`` policy, also persist every n-th unit of long
    inputs and outputs (0 = never); DeepSeek does not publish its interval.
    """

    unit: int = 64
    ttl: float = 24 * 3600.0
    policy: Policy = "boundaries"
    min_tokens: int = 0
    interval_units: int = 0
    clock: Callable[[], float] = attrs.field(default=None)
    _stored: dict[str, dict[bytes, float]] = attrs.field(factory=dict, init=False)
    _seen: dict[str, dict[bytes, float]] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        if self.clock is None:
            import time

            self.clock = time.time

    def reset(self) -> None:
        """Forget every stored prefix (as if the provider flushed its cache)."""
        self._stored.clear()
        self._seen.clear()

    def _live(self, table: dict[bytes, float], key: bytes, now: float) -> bool:
        used = table.get(key)
        if used is None:
            return False
        if now - used > self.ttl:
            del table[key]
            return False
        return True

    def _longest(self, table: dict[bytes, float], chain: Sequence[bytes], now: float) -> int:
        for k in range(len(chain), 0, -1):
            if self._live(table, chain[k - 1], now):
                return k
        return 0

    def account(self, scope: str, input_ids: Sequence[int],
                output_ids: Sequence[int] = (), breakpoints: Sequence[int] = ()) -> CacheResult:
        """Bill ``input_ids`` against the cache of ``scope``, then persist what this request
        leaves behind (its input, and for ``boundaries`` also input + ``output_ids``; for
        ``breakpoints`` also the prefixes ending at the token offsets ``breakpoints``)."""
        now = self.clock()
        stored = self._stored.setdefault(scope, {})
        chain = unit_chain(input_ids, self.unit)
        units = self._longest(stored, chain, now)
        hit = units * self.unit
        if hit < self.min_tokens:
            hit = 0
        if hit:
            stored[chain[units - 1]] = now
        if self.policy == "breakpoints":
            for end in (*breakpoints, len(input_ids)):
                if end // self.unit:
                    stored[chain[end // self.unit - 1]] = now
        else:
            self._persist(scope, chain, list(input_ids), list(output_ids), now)
        return CacheResult(prompt_tokens=len(input_ids), hit_tokens=hit)

    def _persist(self, scope: str, chain: list[bytes], input_ids: list[int],
                 output_ids: list[int], now: float) -> None:
        stored = self._stored[scope]
        if self.policy == "all_units":
            for key in chain:
                stored[key] = now
            return
        seen = self._seen.setdefault(scope, {})
        # Common prefix with an earlier request: persisted now, usable from the next request.
        common = self._longest(seen, chain, now)
        if common:
            stored[chain[common - 1]] = now
        full = chain
        if output_ids:
            tail = input_ids[len(chain) * self.unit:] + output_ids
            full = chain + unit_chain(tail, self.unit, chain[-1] if chain else _ROOT)
        for key in full:
            seen[key] = now
        if chain:
            stored[chain[-1]] = now  # end of the input
        if full:
            stored[full[-1]] = now  # end of input + output
        if self.interval_units > 0:
            for k in range(self.interval_units, len(full) + 1, self.interval_units):
                stored[full[k - 1]] = now
