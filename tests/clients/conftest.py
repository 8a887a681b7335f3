"""Real third-party agents driven through ``ctxfold serve`` (issue 23 item 9).

These tests run the clients themselves (installed from PyPI and npm into their own
virtualenvs / npm prefix by ``.ci/clients.sh``, pinned there), so they run only in that
step: ``bash .ci/clients.sh [client ...]``. Without ``CTXFOLD_CLIENTS_HOME`` (set by that
script) this folder is not collected, so the main suite neither needs the clients nor
reports them as skipped. Every test here carries the ``clients`` marker.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

if not os.environ.get("CTXFOLD_CLIENTS_HOME"):
    collect_ignore_glob = ["test_*.py"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.clients)
