"""Prefix-cache accounting rules, without HTTP."""

from __future__ import annotations

from ctxfold.emulator.cache import PrefixCache, unit_chain


def ids(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def test_unit_chain_identifies_prefixes() -> None:
    a = unit_chain(ids(300), 64)
    b = unit_chain(ids(200), 64)
    assert len(a) == 4 and len(b) == 3
    assert a[:3] == b
    assert unit_chain([9, *ids(299)], 64)[0] != a[0]


def test_append_only_hits_previous_input_plus_output(clock) -> None:
    cache = PrefixCache(unit=64, clock=clock)
    first = cache.account("", ids(1000), ids(50, 5000))
    assert first.hit_tokens == 0 and first.miss_tokens == 1000
    # the next request replays input + output and appends 300 tokens
    nxt = ids(1000) + ids(50, 5000) + ids(300, 9000)
    second = cache.account("", nxt, ids(10, 7000))
    assert second.hit_tokens == (1050 // 64) * 64
    assert second.hit_tokens + second.miss_tokens == len(nxt)


def test_output_not_persisted_when_not_given(clock) -> None:
    cache = PrefixCache(unit=64, clock=clock)
    cache.account("", ids(1000))
    second = cache.account("", ids(1000) + ids(500, 5000))
    assert second.hit_tokens == (1000 // 64) * 64


def test_fork_misses_then_common_prefix_is_persisted(clock) -> None:
    """The DeepSeek guide's example: A+B, then A+C misses, then A+D hits A."""
    cache = PrefixCache(unit=64, clock=clock)
    a = ids(640)
    cache.account("", a + ids(640, 10_000))
    assert cache.account("", a + ids(640, 20_000)).hit_tokens == 0
    assert cache.account("", a + ids(640, 30_000)).hit_tokens == 640


def test_fixed_intervals_are_persisted(clock) -> None:
    cache = PrefixCache(unit=64, interval_units=4, clock=clock)
    cache.account("", ids(1000))
    # a request sharing the first 600 tokens hits the last interval boundary below 600 (512)
    assert cache.account("", ids(600) + ids(400, 50_000)).hit_tokens == 512


def test_ttl_expiry_and_refresh(clock) -> None:
    cache = PrefixCache(unit=64, ttl=100.0, clock=clock)
    cache.account("", ids(640))
    clock.advance(90)
    assert cache.account("", ids(640) + ids(64, 900)).hit_tokens == 640  # refreshed here
    clock.advance(90)
    assert cache.account("", ids(640) + ids(64, 900)).hit_tokens == 704
    clock.advance(101)
    assert cache.account("", ids(640) + ids(64, 900)).hit_tokens == 0


def test_scopes_are_isolated(clock) -> None:
    cache = PrefixCache(unit=64, clock=clock)
    cache.account("alice", ids(640))
    assert cache.account("bob", ids(700)).hit_tokens == 0
    assert cache.account("alice", ids(700)).hit_tokens == 640


def test_all_units_policy_min_and_steps(clock) -> None:
    cache = PrefixCache(unit=128, policy="all_units", min_tokens=1024, clock=clock)
    cache.account("k", ids(1000))
    # shares 1000 tokens, but 896 < 1024: no hit at all
    assert cache.account("k", ids(1000) + ids(500, 9000)).hit_tokens == 0
    cache.account("k", ids(3000))
    # every 128-block of the earlier input is cached: shared 2000 → 1920
    assert cache.account("k", ids(2000) + ids(500, 70_000)).hit_tokens == 1920


def test_reset_forgets_everything(clock) -> None:
    cache = PrefixCache(unit=64, clock=clock)
    cache.account("", ids(640))
    cache.reset()
    assert cache.account("", ids(640)).hit_tokens == 0


def test_breakpoints_policy_caches_only_the_named_ends(clock) -> None:
    # Anthropic's automatic caching: the end of the input and the request's breakpoints
    # (the end of tools + system) are cached; nothing of the reply, nothing in between.
    cache = PrefixCache(unit=16, policy="breakpoints", min_tokens=1024, clock=clock)
    first = cache.account("k", ids(3000), ids(200, 50_000), breakpoints=(1200,))
    assert first.hit_tokens == 0
    # the next request replays input + reply + a tool result: it hits the previous input only
    nxt = ids(3000) + ids(200, 50_000) + ids(300, 60_000)
    assert cache.account("k", nxt, breakpoints=(1200,)).hit_tokens == 3000 // 16 * 16
    # a fold keeps only the system prompt: the breakpoint on its end still hits
    folded = ids(1200) + ids(900, 80_000)
    assert cache.account("k", folded, breakpoints=(1200,)).hit_tokens == 1200 // 16 * 16
    # a cached prefix under the minimum is no hit
    short = PrefixCache(unit=16, policy="breakpoints", min_tokens=1024, clock=clock)
    short.account("k", ids(800))
    assert short.account("k", ids(800) + ids(400, 90_000)).hit_tokens == 0
