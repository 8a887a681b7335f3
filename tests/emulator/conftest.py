"""Helpers for the emulator tests: an exact per-character token source and a fake clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


class CharTokens:
    """One token per character: token counts in tests are exact and easy to reason about."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]


class FakeClock:
    """A settable clock (seconds)."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def chars() -> CharTokens:
    return CharTokens()


@pytest.fixture(autouse=True)
def _bounded(request: pytest.FixtureRequest) -> Iterator[None]:
    # Every emulator test must finish quickly; a hung stream should fail, not hang CI.
    import signal

    def expired(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"{request.node.name} took longer than 60 s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
