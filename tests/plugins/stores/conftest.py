"""One store contract, every store: the ``stores`` fixture runs a test on ``fs`` and on
``postgres`` (a real server, see :mod:`tests.postgres`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.postgres import StoreSpec

from ctxfold.kernel.contracts import Store


@pytest.fixture(params=["fs", "postgres"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSpec:
    if request.param == "fs":
        return StoreSpec("fs", str(tmp_path / "sessions"))
    spec: StoreSpec = request.getfixturevalue("postgres_spec")
    return spec


@pytest.fixture
def stores(store_spec: StoreSpec) -> Iterator[Callable[[], Store]]:
    """``stores()`` opens the store under test again (another worker on the same data)."""
    opened: list[Store] = []

    def open_one() -> Store:
        opened.append(store_spec.open())
        return opened[-1]

    yield open_one
    for store in opened:
        close = getattr(store, "close", None)
        if close is not None:
            close()
