"""Malformed importer input is an ImporterError naming the file, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ctxfold

USER = {"role": "user", "content": "hi"}


@pytest.mark.parametrize(("document", "says"), [
    ({"messages": [USER, {"role": "assistant", "content": "x", "tool_calls": True}]},
     "tool_calls: must be a list"),
    ({"messages": [USER], "tools": [{"type": "function", "function": 5}]},
     "tools[0].function: must be an object"),
    ({"messages": [USER], "tools": [{"type": "function",
                                     "function": {"name": "x", "parameters": [1]}}]},
     "tools[0].parameters: must be a JSON-schema object"),
    ({"messages": [USER], "tools": 5}, "tools: must be a list, got int"),
])
def test_malformed_openai_documents(tmp_path: Path, document: object, says: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ctxfold.ImporterError) as info:
        ctxfold.import_session(path, ctxfold.Registry.from_config(ctxfold.Config()))
    assert str(path) in str(info.value) and says in str(info.value)


@pytest.mark.parametrize("name", ["deep.jsonl", "deep.json"])
def test_a_deeply_nested_line_is_an_importer_error(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    deep = "[" * 100_000 + "]" * 100_000
    path.write_text(json.dumps(USER) + "\n" + deep + "\n" if name.endswith("l")
                    else '{"messages": ' + deep + "}")
    with pytest.raises(ctxfold.ImporterError, match=str(path)):
        ctxfold.import_session(path, ctxfold.Registry.from_config(ctxfold.Config()))


def test_an_importer_plugin_that_trips_is_an_importer_error(tmp_path: Path) -> None:
    """The boundary holds for third-party importers too."""
    from ctxfold import ImportedSession, StrategySpec, hookimpl

    class Sloppy:
        name = "sloppy"

        def sniff(self, path: Path) -> bool:
            return True

        def load(self, path: Path) -> ImportedSession:
            return {}["missing"]  # KeyError

    class Plugin:
        @hookimpl
        def ctxfold_importers(self):
            return [StrategySpec(name="sloppy", factory=lambda c: Sloppy())]

    registry = ctxfold.Registry.from_config(load_entry_points=False, extra_plugins=[Plugin()])
    path = tmp_path / "x.json"
    path.write_text("{}")
    with pytest.raises(ctxfold.ImporterError, match=r"not a valid sloppy transcript.*KeyError"):
        ctxfold.import_session(path, registry, "sloppy")
