"""``ctxfold.testing.StoreContract`` runs on a store defined right here, as a third party's
would, and fails on a store that breaks the contract."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from ctxfold.plugins.stores.fs import FsStore
from ctxfold.testing import StoreContract


class NestedStore(FsStore):
    """A third-party store: the fs store, keeping its sessions one directory down."""

    def __init__(self, root: Path) -> None:
        super().__init__(Path(root) / "nested")


class TestNestedStore(StoreContract):
    @pytest.fixture
    def open_store(self, tmp_path: Path):
        return functools.partial(NestedStore, tmp_path)


class BlindSwapStore(NestedStore):
    """Breaks the contract: its compare-and-swap ignores what is stored."""

    def replace_sidecar(self, session_id, data, expected):
        self.write_sidecar(session_id, data)
        return True


def test_the_suite_fails_a_store_that_breaks_the_contract(tmp_path: Path) -> None:
    opener = functools.partial(BlindSwapStore, tmp_path)
    with pytest.raises(AssertionError):
        StoreContract().test_the_sidecar_is_a_compare_and_swap(opener)


def test_the_suite_passes_the_same_check_on_the_honest_store(tmp_path: Path) -> None:
    StoreContract().test_the_sidecar_is_a_compare_and_swap(
        functools.partial(NestedStore, tmp_path))


def test_a_subclass_without_open_store_is_told_what_to_define() -> None:
    with pytest.raises(NotImplementedError, match="open_store"):
        StoreContract.open_store.__wrapped__(StoreContract())  # type: ignore[attr-defined]
