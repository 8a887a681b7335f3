"""The covered-prefix hash is computed incrementally and always equals the full fingerprint."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxfold.kernel import fingerprint as fp
from ctxfold.kernel.fingerprint import covered_prefix_hash, fingerprint
from ctxfold.kernel.types import Message


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
        expected = fingerprint(canonical[:n]) if n > 0 else ""
        assert covered_prefix_hash(canonical, n) == expected


def test_an_install_hashes_only_the_new_messages(monkeypatch) -> None:
    canonical = messages(5_000)
    assert covered_prefix_hash(canonical, 4_000) == fingerprint(canonical[:4_000])
    seen: list[int] = []
    real = fp._extend

    def counting(h, batch, first):  # type: ignore[no-untyped-def]
        batch = list(batch)
        seen.append(len(batch))
        return real(h, batch, first)

    canonical.extend(messages(10, tag="new"))
    expected = fingerprint(canonical[:5_008])
    monkeypatch.setattr(fp, "_extend", counting)
    assert covered_prefix_hash(canonical, 5_008) == expected
    assert seen == [1_008]  # extended from the 4,000 seen before, not rehashed


def test_same_last_message_in_another_list_is_not_reused() -> None:
    shared = Message(role="user", content="continue")
    a = [Message(role="user", content="a"), shared]
    b = [Message(role="user", content="b"), shared]
    assert covered_prefix_hash(a, 2) == fingerprint(a)
    assert covered_prefix_hash(b, 2) == fingerprint(b)
    assert fingerprint(a) != fingerprint(b)
