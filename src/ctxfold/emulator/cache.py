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

  :meth:`PrefixCache.account_marked` is the same policy at block granularity with the
  request's own ``cache_control`` marks (the emulator's ``anthropic`` profile): entries are
  written only at marked blocks, each with its mark's TTL; a mark reads the longest live
  entry among its own block and the ``lookback`` blocks before it; writes are billed per
  TTL (:class:`MarkedResult`).

Entries expire ``ttl`` seconds after their last use (a hit or a re-store refreshes them);
a marked entry after its own mark's TTL.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Mapping, Sequence
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


@attrs.frozen
class Mark:
    """A ``cache_control`` breakpoint: the index of the marked block (in prefix order) and
    the entry's TTL in seconds."""

    block: int
    ttl: float


@attrs.frozen
class MarkedResult:
    """The accounting of one request with explicit marks (Anthropic's ``usage``).

    ``read`` tokens came from the cache; ``writes`` are ``(ttl, tokens)`` pairs of the
    prefix written by this request, in prefix order; the rest of the prompt is ``uncached``.
    ``read + sum(writes) + uncached == prompt_tokens``.
    """

    prompt_tokens: int
    read: int
    writes: tuple[tuple[float, int], ...] = ()

    def written(self, ttl: float | None = None) -> int:
        """Tokens written with ``ttl`` (all TTLs when ``None``)."""
        return sum(n for t, n in self.writes if ttl is None or t == ttl)

    @property
    def uncached(self) -> int:
        return self.prompt_tokens - self.read - self.written()


def block_chain(ids: Sequence[int], ends: Sequence[int],
                salts: Mapping[int, bytes] | None = None) -> list[bytes]:
    """The hash chain of ``ids`` cut at the block ends ``ends`` (increasing token offsets):
    element ``k`` identifies ``ids[:ends[k]]`` *and* where its blocks start and end, so two
    requests share an element only when they share every block up to it. ``salts[k]`` is
    mixed in at block ``k`` (and so into every later element): request settings that are not
    prompt text but still invalidate the cache from there on."""
    chain: list[bytes] = []
    previous, start = _ROOT, 0
    for k, end in enumerate(ends):
        block = array("I", (i & 0xFFFFFFFF for i in ids[start:end])).tobytes()
        salt = (salts or {}).get(k, b"")
        previous = hashlib.blake2b(previous + len(salt).to_bytes(8, "big") + salt
                                   + len(block).to_bytes(8, "big") + block,
                                   digest_size=16).digest()
        chain.append(previous)
        start = end
    return chain


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
    #: Marked entries (:meth:`account_marked`): key → (last use, TTL).
    _marked: dict[str, dict[bytes, tuple[float, float]]] = attrs.field(factory=dict,
                                                                     init=False)

    def __attrs_post_init__(self) -> None:
        if self.clock is None:
            import time

            self.clock = time.time

    def reset(self) -> None:
        """Forget every stored prefix (as if the provider flushed its cache)."""
        self._stored.clear()
        self._seen.clear()
        self._marked.clear()

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

    def account_marked(self, scope: str, input_ids: Sequence[int], ends: Sequence[int],
                       marks: Sequence[Mark], lookback: int = 20,
                       salts: Mapping[int, bytes] | None = None) -> MarkedResult:
        """Bill a request whose blocks end at the token offsets ``ends`` and whose
        ``cache_control`` marks are ``marks`` (in prefix order), then write its entries;
        ``salts`` as :func:`block_chain` takes them.

        As https://platform.claude.com/docs/en/build-with-claude/prompt-caching describes:

        * read — for each mark, the longest live entry at its own block or one of the
          ``lookback`` blocks before it; the longest over all marks is read (and refreshed);
        * write — every mark whose prefix is at least ``min_tokens`` long and not already
          cached writes an entry with its own TTL; the tokens between the read and the last
          such mark are billed as written, those up to the last 1h-class mark (the longest
          TTL) at that TTL and the rest at the TTL of the mark that ends them;
        * a prefix below ``min_tokens`` is neither read nor written.
        """
        now = self.clock()
        table = self._marked.setdefault(scope, {})
        chain = block_chain(input_ids, ends, salts)

        def live(key: bytes) -> bool:
            entry = table.get(key)
            if entry is None:
                return False
            if now - entry[0] > entry[1]:
                del table[key]
                return False
            return True

        read_block = -1
        for mark in marks:
            for block in range(mark.block, max(-1, mark.block - lookback - 1), -1):
                if block <= read_block:
                    break
                if live(chain[block]):
                    read_block = block
                    break
        read = ends[read_block] if read_block >= 0 else 0
        if read_block >= 0:
            table[chain[read_block]] = (now, table[chain[read_block]][1])
        writes: list[tuple[float, int]] = []
        covered = read
        eligible = [m for m in marks if ends[m.block] >= self.min_tokens]
        for i, mark in enumerate(eligible):
            end = ends[mark.block]
            key = chain[mark.block]
            previous = table.get(key)
            table[key] = (now, max(mark.ttl, previous[1]) if previous and live(key)
                          else mark.ttl)
            if end <= covered:
                continue
            # A span is written at the longest TTL of the marks at or after it.
            ttl = max(m.ttl for m in eligible[i:])
            if writes and writes[-1][0] == ttl:
                writes[-1] = (ttl, writes[-1][1] + end - covered)
            else:
                writes.append((ttl, end - covered))
            covered = end
        return MarkedResult(prompt_tokens=len(input_ids), read=read, writes=tuple(writes))

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
