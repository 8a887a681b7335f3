"""One store contract, every store: the ``store_spec`` fixture runs a test on ``fs`` and on
``postgres`` (a real server, see :mod:`tests.postgres`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.postgres import StoreSpec


@pytest.fixture(params=["fs", "postgres"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSpec:
    if request.param == "fs":
        return StoreSpec("fs", str(tmp_path / "sessions"))
    spec: StoreSpec = request.getfixturevalue("postgres_spec")
    return spec
