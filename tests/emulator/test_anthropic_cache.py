"""Anthropic's explicit-breakpoint cache rules (``PrefixCache.account_marked``), without HTTP,
with exact numbers: reads at the longest live entry within the lookback of a breakpoint,
writes per TTL, the minimum cacheable prefix, expiry and refresh."""

from __future__ import annotations

import pytest

from ctxfold.emulator.cache import Mark, PrefixCache, block_chain

FIVE, HOUR = 300.0, 3600.0


def blocks(*sizes: int, start: int = 0) -> tuple[list[int], list[int]]:
    """Token ids and block ends for blocks of ``sizes`` tokens (ids distinct per block)."""
    ids: list[int] = []
    ends: list[int] = []
    for n, size in enumerate(sizes):
        ids.extend((start + n) * 100_000 + i for i in range(size))
        ends.append(len(ids))
    return ids, ends


@pytest.fixture
def cache(clock) -> PrefixCache:
    return PrefixCache(unit=1, ttl=FIVE, policy="breakpoints", min_tokens=1024, clock=clock)


def test_block_chain_tells_block_boundaries_apart() -> None:
    ids = list(range(10))
    assert block_chain(ids, [4, 10])[0] == block_chain([*ids[:4], 99], [4, 5])[0]
    # the same tokens cut differently are different prefixes
    assert block_chain(ids, [4, 10])[1] != block_chain(ids, [5, 10])[1]


def test_first_request_writes_up_to_the_breakpoint_only(cache) -> None:
    ids, ends = blocks(1500, 300, 200)
    result = cache.account_marked("", ids, ends, [Mark(1, FIVE)])
    assert (result.read, result.writes, result.uncached) == (0, ((FIVE, 1800),), 200)


def test_next_turn_reads_the_previous_breakpoint_and_writes_the_new_part(cache) -> None:
    ids, ends = blocks(1500, 300, 200)
    cache.account_marked("", ids, ends, [Mark(2, FIVE)])
    more, more_ends = blocks(400, 100, start=10)
    ids2, ends2 = ids + more, ends + [2000 + e for e in more_ends]
    result = cache.account_marked("", ids2, ends2, [Mark(3, FIVE)])
    # the breakpoint moved to block 3; looking back it finds block 2 written last time
    assert (result.read, result.writes, result.uncached) == (2000, ((FIVE, 400),), 100)
    again = cache.account_marked("", ids2, ends2, [Mark(3, FIVE)])
    assert (again.read, again.writes, again.uncached) == (2400, (), 100)


def test_nothing_is_cached_below_the_minimum(cache) -> None:
    ids, ends = blocks(500, 400)
    for _ in range(2):
        result = cache.account_marked("", ids, ends, [Mark(1, FIVE)])
        assert (result.read, result.writes, result.uncached) == (0, (), 900)


def test_a_mark_below_the_minimum_writes_nothing_but_a_later_one_writes_all(cache) -> None:
    ids, ends = blocks(500, 1000, 50)
    result = cache.account_marked("", ids, ends, [Mark(0, FIVE), Mark(1, FIVE)])
    assert (result.read, result.writes, result.uncached) == (0, ((FIVE, 1500),), 50)


def test_one_hour_and_five_minute_writes_are_split(cache) -> None:
    ids, ends = blocks(1200, 300, 500, 20)
    result = cache.account_marked("", ids, ends, [Mark(0, HOUR), Mark(2, FIVE)])
    assert result.writes == ((HOUR, 1200), (FIVE, 800))
    assert (result.written(HOUR), result.written(FIVE), result.uncached) == (1200, 800, 20)
    again = cache.account_marked("", ids, ends, [Mark(0, HOUR), Mark(2, FIVE)])
    assert (again.read, again.writes) == (2000, ())


def test_the_one_hour_entry_outlives_the_five_minute_one(cache, clock) -> None:
    ids, ends = blocks(1200, 300, 500)
    marks = [Mark(0, HOUR), Mark(2, FIVE)]
    cache.account_marked("", ids, ends, marks)
    clock.advance(600)
    result = cache.account_marked("", ids, ends, marks)
    assert (result.read, result.writes) == (1200, ((FIVE, 800),))


def test_entries_expire_after_their_ttl_and_a_hit_refreshes_them(cache, clock) -> None:
    ids, ends = blocks(1500, 10)
    marks = [Mark(0, FIVE)]
    cache.account_marked("", ids, ends, marks)
    clock.advance(200)
    assert cache.account_marked("", ids, ends, marks).read == 1500
    clock.advance(200)  # 400 s after the write, 200 s after the refreshing hit
    assert cache.account_marked("", ids, ends, marks).read == 1500
    clock.advance(301)
    expired = cache.account_marked("", ids, ends, marks)
    assert (expired.read, expired.writes) == (0, ((FIVE, 1500),))


def test_lookback_reaches_twenty_blocks_before_a_breakpoint(cache) -> None:
    ids, ends = blocks(1100, *([10] * 40))
    cache.account_marked("", ids, ends, [Mark(2, FIVE)])  # entry at block 2 (1120 tokens)
    assert cache.account_marked("", ids, ends, [Mark(23, FIVE)]).read == 0
    cache.reset()
    cache.account_marked("", ids, ends, [Mark(2, FIVE)])
    assert cache.account_marked("", ids, ends, [Mark(22, FIVE)]).read == 1120


def test_an_earlier_breakpoint_bridges_a_long_gap(cache) -> None:
    ids, ends = blocks(1100, *([10] * 40))
    cache.account_marked("", ids, ends, [Mark(2, FIVE)])
    result = cache.account_marked("", ids, ends, [Mark(2, FIVE), Mark(30, FIVE)])
    assert (result.read, result.writes) == (1120, ((FIVE, 280),))


def test_a_changed_block_misses_everything_after_it(cache) -> None:
    ids, ends = blocks(1500, 300)
    cache.account_marked("", ids, ends, [Mark(1, FIVE)])
    changed = [ids[0] + 1, *ids[1:]]
    result = cache.account_marked("", changed, ends, [Mark(1, FIVE)])
    assert (result.read, result.writes) == (0, ((FIVE, 1800),))


def test_no_marks_no_caching(cache) -> None:
    ids, ends = blocks(1500, 300)
    cache.account_marked("", ids, ends, [Mark(1, FIVE)])
    result = cache.account_marked("", ids, ends, [])
    assert (result.read, result.writes, result.uncached) == (0, (), 1800)


def test_a_salt_invalidates_from_its_block_on(cache) -> None:
    ids, ends = blocks(1200, 300, 400)
    marks = [Mark(0, FIVE), Mark(2, FIVE)]
    cache.account_marked("", ids, ends, marks, salts={1: b"thinking on"})
    same = cache.account_marked("", ids, ends, marks, salts={1: b"thinking on"})
    assert same.read == 1900
    # the setting changed: the entry before the salted block still hits, later ones do not
    changed = cache.account_marked("", ids, ends, marks, salts={1: b"thinking off"})
    assert (changed.read, changed.writes) == (1200, ((FIVE, 700),))
