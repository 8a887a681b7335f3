"""``open_session()`` without ``config=`` loads the configuration the ``ctxfold`` command
loads (user file, ``./ctxfold.toml``, ``CTXFOLD_*``), so the documented library path honours
the TOML; ``config=ctxfold.Config()`` reads nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ctxfold
from ctxfold.cli.main import main


def summarize(request: ctxfold.SummaryRequest) -> str:
    return "## Goal\n- summary"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXFOLD_CONFIG_HOME", str(tmp_path / "home"))
    for name in ("CTXFOLD_AGENT_COMPACT_RATIO", "CTXFOLD_STORE_PATH"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_a_project_file_beside_the_script_is_honoured(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "ctxfold.toml").write_text(
        '[agent]\ncompact_ratio = 0.5\n[store]\npath = "mysessions"\n'
        '[estimator]\nname = "heuristic"\n')
    cm = ctxfold.open_session("a", summarize=summarize, window=10_000)
    assert cm.trigger_tokens == 5_000  # not the default 0.8
    assert cm.estimator.name == "heuristic"
    cm.append({"role": "user", "content": "hi"})
    assert (project / "mysessions" / "a.jsonl").is_file()
    assert not (project / ".ctxfold").exists()
    assert main(["sessions", "list", "--json"]) == 0  # the CLI sees the host's session
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == ["a"]


def test_ctxfold_variables_are_honoured(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXFOLD_AGENT_COMPACT_RATIO", "0.5")
    monkeypatch.setenv("CTXFOLD_STORE_PATH", str(project / "env-sessions"))
    cm = ctxfold.open_session("a", summarize=summarize, window=10_000)
    assert cm.trigger_tokens == 5_000
    assert cm.store.exists("a") and (project / "env-sessions" / "a.jsonl").is_file()


def test_an_explicit_config_reads_no_file_and_no_variable(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "ctxfold.toml").write_text('[agent]\ncompact_ratio = 0.5\n')
    monkeypatch.setenv("CTXFOLD_AGENT_COMPACT_RATIO", "0.6")
    cm = ctxfold.open_session("a", config=ctxfold.Config(), summarize=summarize,
                              window=10_000)
    assert cm.trigger_tokens == 8_000
    assert (project / ".ctxfold" / "sessions" / "a.jsonl").is_file()


def test_a_bad_file_is_a_config_error_naming_it(project: Path) -> None:
    (project / "ctxfold.toml").write_text('[agent]\ncompact_ratio = 1.5\n')
    with pytest.raises(ctxfold.ConfigError, match=r"ctxfold\.toml line 2: agent\.compact_ratio"):
        ctxfold.open_session("a", summarize=summarize)


def test_the_loaders_notices_reach_the_host(project: Path) -> None:
    (project / "ctxfold.toml").write_text('[agent]\nsoft_compact_ratio = 0.5\n')
    cm = ctxfold.open_session("a", summarize=summarize)
    assert any("retired configuration keys" in n for n in cm.notices)


def test_create_provider_loads_the_same_configuration(project: Path) -> None:
    (project / "ctxfold.toml").write_text('[provider]\nprofile = "mimo"\n')
    with ctxfold.create_provider() as provider:
        assert provider.name == "emulator:mimo"
