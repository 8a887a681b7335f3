"""The covered-prefix hash is computed incrementally and always equals the full chain."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxfold import Message
from ctxfold.kernel import fingerprint as fp
from ctxfold.kernel.fingerprint import chain_hash, covered_prefix_hash


def messages(n: int, tag: str = "m") -> list[Message]:
    return [Message(role="user" if i % 2 else "assistant", content=f"{tag}{i}",
                    local_only=i % 7 == 3) for i in range(n)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=12),
       st.integers(min_value=0, max_value=2**16))
def test_incremental_equals_full(counts: list[int], seed: int) -> None:
    rng = random.Random(seed)
    canonical = messages(rng.randint(1, 20))
    for count in counts:
        canonical.extend(messages(rng.randint(0, 5), tag=f"x{seed}-"))
        if rng.random() < 0.2:  # a rewind: a new list, a different tail
            canonical = canonical[: rng.randint(1, len(canonical))] + messages(2, tag="r")
        n = min(count, len(canonical))
        expected = chain_hash(canonical[:n]) if n > 0 else ""
        assert covered_prefix_hash(canonical, n) == expected


def test_an_install_hashes_only_the_new_messages(monkeypatch) -> None:
    canonical = messages(5_000)
    assert covered_prefix_hash(canonical, 4_000) == chain_hash(canonical[:4_000])
    canonical.extend(messages(10, tag="new"))
    expected = chain_hash(canonical[:5_008])
    seen: list[int] = []
    real = fp.visible_fields

    def counting(message):  # type: ignore[no-untyped-def]
        seen.append(1)
        return real(message)

    monkeypatch.setattr(fp, "visible_fields", counting)
    assert covered_prefix_hash(canonical, 5_008) == expected
    hashed = sum(1 for m in canonical[4_000:5_008] if not m.local_only)
    assert len(seen) == hashed  # extended from the 4,000 seen before, not rehashed


def test_the_chain_extends_from_a_hash_alone() -> None:
    canonical = messages(300)
    assert chain_hash(canonical[120:], chain_hash(canonical[:120])) == chain_hash(canonical)
    assert chain_hash(canonical[:1]) != chain_hash(canonical[1:2])
    assert len(chain_hash([])) == 32  # never empty: a fixed seed


def test_a_vouched_prefix_is_extended_without_its_messages() -> None:
    class Vouched(list):  # type: ignore[type-arg]  # a store vouched for its first 200
        def __init__(self, items: list[Message]) -> None:
            super().__init__(items)
            self.vouched = {200: "ab" * 16}

    canonical = Vouched(messages(250))
    assert covered_prefix_hash(canonical, 200) == "ab" * 16
    assert covered_prefix_hash(canonical, 250) == chain_hash(canonical[200:], "ab" * 16)


def test_same_last_message_in_another_list_is_not_reused() -> None:
    shared = Message(role="user", content="continue")
    a = [Message(role="user", content="a"), shared]
    b = [Message(role="user", content="b"), shared]
    assert covered_prefix_hash(a, 2) == chain_hash(a)
    assert covered_prefix_hash(b, 2) == chain_hash(b)
    assert chain_hash(a) != chain_hash(b)
