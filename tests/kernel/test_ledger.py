"""The cache ledger's arithmetic, checked against figures worked out by hand."""

from __future__ import annotations

import pytest

from ctxfold.kernel.ledger import LedgerEntry, LedgerTotal

# DeepSeek flash, USD per 1M tokens (hit, miss, output).
PRICES = (0.003, 0.15, 0.60)


def test_a_checkpoint_entry_by_hand() -> None:
    # The cached prefix was 60,000 tokens; the checkpoint keeps a 2,000-token head, so the
    # first request reads 2,000 and 58,000 are invalidated. Each request sends 50,000 fewer
    # tokens, so 8,000 of the invalidated tokens are re-written (58,000 - 50,000).
    entry = LedgerEntry(read=2_000, written=10_500, invalidated=58_000,
                        saved_per_request=50_000, requests=10, summary_input=60_000,
                        summary_read=59_000, summary_output=1_500, estimated=False)
    assert entry.rewritten == 8_000
    assert entry.not_sent == 500_000
    # summary: 59,000 × 0.003 + 1,000 × 0.15 + 1,500 × 0.60 = 177 + 150 + 900 = 1,227 µ$
    assert entry.summary_cost(*PRICES) == pytest.approx(0.001227)
    # saving: 500,000 × 0.003 = 1,500 µ$; premium: 8,000 × 0.147 = 1,176 µ$
    # net: 1,500 − 1,176 − 1,227 = −903 µ$ (ten requests do not pay for this fold yet)
    assert entry.net_saving(*PRICES) == pytest.approx(-0.000903)
    # at 30 requests: 1,500,000 × 0.003 = 4,500 µ$ → 4,500 − 1,176 − 1,227 = 2,097 µ$
    assert LedgerEntry(**{**_fields(entry), "requests": 30}).net_saving(*PRICES) == \
        pytest.approx(0.002097)


def test_a_prune_that_shrinks_more_than_it_invalidates_rewrites_nothing() -> None:
    entry = LedgerEntry(read=40_000, written=1_000, invalidated=3_000, saved_per_request=5_000,
                        requests=4)
    assert entry.rewritten == 0
    assert entry.summary_cost(*PRICES) == 0
    assert entry.net_saving(*PRICES) == pytest.approx(20_000 * 0.003 / 1e6)


def test_the_total_sums_the_entries_and_its_net_is_theirs() -> None:
    a = LedgerEntry(read=2_000, written=10_500, invalidated=58_000, saved_per_request=50_000,
                    requests=10, summary_input=60_000, summary_read=59_000,
                    summary_output=1_500, estimated=False)
    b = LedgerEntry(read=40_000, written=1_000, invalidated=3_000, saved_per_request=5_000,
                    requests=4)
    total = LedgerTotal.of([a, b])
    assert (total.folds, total.estimated, total.requests) == (2, 1, 14)
    assert (total.read, total.written, total.invalidated) == (42_000, 11_500, 61_000)
    assert (total.rewritten, total.not_sent) == (8_000, 520_000)
    assert (total.summary_input, total.summary_read, total.summary_output) == \
        (60_000, 59_000, 1_500)
    assert total.net_saving(*PRICES) == pytest.approx(a.net_saving(*PRICES)
                                                      + b.net_saving(*PRICES))
    assert LedgerTotal.of([]) == LedgerTotal()


def _fields(entry: LedgerEntry) -> dict[str, object]:
    import attrs

    return attrs.asdict(entry)
