"""import_session / detect_format: selection, errors and third-party importers."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxfold import (
    ImportedSession,
    ImporterError,
    ImporterOptions,
    Message,
    Registry,
    StrategyContext,
    StrategySpec,
    ToolCall,
    hookimpl,
    import_session,
)
from ctxfold.importing import detect_format, known_formats
from ctxfold.kernel.plugin_manager import builtin_plugin_modules

BUILTIN = [
    "claude-code-jsonl", "claude-code-xml", "mini-swe-agent-v1", "mini-swe-agent-v2",
    "openai", "openhands-sdk-log", "openhands-v1", "swe-agent",
]


def _registry(*plugins: object) -> Registry:
    return Registry.from_config(load_entry_points=False, extra_plugins=plugins)


def test_builtins_registered_through_default_plugins() -> None:
    modules = [m for m in builtin_plugin_modules() if ".importers." in m]
    assert len(modules) == 8
    registry = _registry()
    assert known_formats(registry) == BUILTIN
    assert all(s.source.startswith("builtin:ctxfold.plugins.importers.")
               for s in registry.specs("importer"))


def test_unknown_file_lists_known_formats(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("just some notes\n")
    with pytest.raises(ImporterError) as info:
        import_session(path, _registry())
    message = str(info.value)
    assert str(path) in message and "unknown transcript format" in message
    assert all(name in message for name in BUILTIN)
    assert "fmt=" in message


def test_unknown_fmt_lists_known_formats(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("[]")
    with pytest.raises(ImporterError) as info:
        import_session(path, _registry(), fmt="nope")
    assert "'nope'" in str(info.value) and str(path) in str(info.value)
    assert "known formats: " + ", ".join(BUILTIN) in str(info.value)


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ImporterError, match="no such file"):
        detect_format(tmp_path / "missing.json", _registry())


def test_invalid_importer_option(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("[]")
    with pytest.raises(ImporterError, match="exit_message"):
        import_session(path, _registry(), options=ImporterOptions(exit_message="keep"))


class _LogImporter:
    """A third-party format: lines 'user: ...' / 'assistant: ...'."""

    name = "chatlog"

    def __init__(self, broken: bool = False) -> None:
        self.broken = broken

    def sniff(self, path: Path) -> bool:
        return path.suffix == ".chatlog"

    def load(self, path: Path) -> ImportedSession:
        messages = []
        for line in path.read_text().splitlines():
            role, _, text = line.partition(": ")
            messages.append(Message(role=role, content=text))  # type: ignore[arg-type]
        if self.broken:
            messages.append(Message(role="tool", content="?", tool_call_id="ghost"))
        return ImportedSession(name=path.stem, messages=tuple(messages),
                               reported_usage=(None,) * len(messages), format=self.name,
                               source=path)


class _Plugin:
    def __init__(self, broken: bool = False) -> None:
        self.broken = broken

    @hookimpl
    def ctxfold_importers(self) -> list[StrategySpec]:
        def factory(_context: StrategyContext) -> _LogImporter:
            return _LogImporter(self.broken)

        return [StrategySpec(name="chatlog", factory=factory)]


def test_third_party_importer_is_detected_before_generic(tmp_path: Path) -> None:
    path = tmp_path / "talk.chatlog"
    path.write_text("user: hi\nassistant: hello\n")
    registry = _registry(_Plugin())
    assert "chatlog" in known_formats(registry)
    assert detect_format(path, registry) == "chatlog"
    session = import_session(path, registry)
    assert [m.role for m in session.messages] == ["user", "assistant"]


def test_pairing_is_enforced_for_third_party_importers(tmp_path: Path) -> None:
    path = tmp_path / "talk.chatlog"
    path.write_text("user: hi\n")
    with pytest.raises(ImporterError, match=r"message 1.*'ghost'"):
        import_session(path, _registry(_Plugin(broken=True)))


def test_imported_session_requires_aligned_usage() -> None:
    with pytest.raises(ValueError, match="aligned"):
        ImportedSession(name="x", messages=(Message(role="user", content="a"),))
    calls = (ToolCall(id="c", name="f"),)
    session = ImportedSession(
        name="x", messages=(Message(role="assistant", tool_calls=calls),),
        reported_usage=(None,), source="a/b.json",
    )
    assert session.source == Path("a/b.json")
