"""``ctxfold config show | init | migrate``."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from ctxfold import Config, Registry, load_config
from ctxfold.cli.main import main

SECRET = "sk-test-DO-NOT-PRINT-123"
PASSWORD = "hunter2-secret"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean working directory, user config dir and environment."""
    for name in list(os.environ):
        if name.startswith("CTXFOLD_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("CTXFOLD_CONFIG_HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def test_show_masks_secrets_and_names_sources(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "ctxfold.toml").write_text(
        '[provider]\nname = "deepseek"\napi_key_env = "DEEPSEEK_API_KEY"\n')
    monkeypatch.setenv("DEEPSEEK_API_KEY", SECRET)
    monkeypatch.setenv("CTXFOLD_PROVIDER_BASE_URL", f"https://bob:{PASSWORD}@api.example/v1")
    assert main(["config", "show"]) == 0
    out, err = capsys.readouterr()
    for text in (out, err):
        assert SECRET not in text and PASSWORD not in text
    assert 'api_key_env = "DEEPSEEK_API_KEY"' in out
    assert "https://***@api.example/v1" in out
    assert "env CTXFOLD_PROVIDER_BASE_URL" in out
    assert f"project file {project / 'ctxfold.toml'}" in out
    assert "compact_ratio = 0.8" in out and "# default" in out

    assert main(["config", "show", "--json"]) == 0
    out, _ = capsys.readouterr()
    assert SECRET not in out and PASSWORD not in out
    data = json.loads(out)
    assert data["config"]["provider"]["base_url"]["value"] == "https://***@api.example/v1"
    assert data["config"]["agent"]["compact_ratio"] == {"value": 0.8, "source": "default"}
    assert data["files"] == [str(project / "ctxfold.toml")]


def test_show_errors_hide_secret_env_values(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CTXFOLD_PROVIDER_API_KEY", SECRET)
    assert main(["config", "show"]) == 1
    out, err = capsys.readouterr()
    assert "CTXFOLD_PROVIDER_API_KEY" in err
    assert SECRET not in out + err


def test_show_prints_one_migration_notice(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "ctxfold.toml").write_text(
        "[agent]\nsoft_compact_ratio = 0.5\ncompact_force_ratio = 0.9\n")
    assert main(["config", "show"]) == 0
    out, err = capsys.readouterr()
    assert err.count("ctxfold config migrate") == 1
    assert "soft_compact_ratio = 0.0" in out and "retired" in out


def test_init_writes_a_private_file_that_loads_as_the_defaults(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "init"]) == 0
    path = project / "ctxfold.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "# The only automatic trigger" in path.read_text()
    loaded = load_config(cwd=project, env={}, user_config_path=project / "none.toml")
    assert loaded.config == Registry.from_config().resolve(Config())
    assert loaded.notices == ()
    assert loaded.sources["agent.compact_ratio"] == f"project file {path}"


def test_init_refuses_to_overwrite_without_force(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project / "custom.toml"
    path.write_text("# mine\n")
    assert main(["config", "init", str(path)]) == 1
    err = capsys.readouterr().err
    assert str(path) in err and "already exists" in err and "--force" in err
    assert path.read_text() == "# mine\n"
    assert main(["config", "init", str(path), "--force"]) == 0
    assert "[agent]" in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_migrate_command(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = project / "ctxfold.toml"
    original = "# keep\n[agent]\nsoft_compact_ratio = 0.5\ncompact_ratio = 0.7\n"
    path.write_text(original)
    assert main(["config", "migrate", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "-soft_compact_ratio = 0.5" in out and path.read_text() == original
    assert main(["config", "migrate", str(path)]) == 0
    assert f"{path}:3: removed agent.soft_compact_ratio" in capsys.readouterr().out
    assert path.read_text() == "# keep\n[agent]\ncompact_ratio = 0.7\n"
    assert main(["config", "migrate", str(path)]) == 0
    assert "nothing to migrate" in capsys.readouterr().out


def test_migrate_missing_file_names_it(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "migrate", "nope.toml"]) == 1
    err = capsys.readouterr().err
    assert "nope.toml" in err and "does not exist" in err


def test_unknown_strategy_name_fails_naming_file_and_key(tmp_path, capsys) -> None:
    from ctxfold.cli.main import main

    config = tmp_path / "ctxfold.toml"
    config.write_text('[estimator]\nname = "nope"\n')
    session = tmp_path / "s.json"
    session.write_text('[{"role": "user", "content": "hi"}]')
    assert main(["--config", str(config), "estimate", str(session)]) == 1
    err = capsys.readouterr().err
    assert str(config) in err and "estimator.name = 'nope'" in err and "heuristic" in err


def test_unknown_disabled_plugin_is_reported(tmp_path, capsys) -> None:
    from ctxfold.cli.main import main

    config = tmp_path / "ctxfold.toml"
    config.write_text('[plugins]\ndisabled = ["heuristic-typo"]\n')
    assert main(["--config", str(config), "plugins", "--json"]) == 0
    assert "'heuristic-typo'" in capsys.readouterr().err


def test_show_names_what_the_provider_declares(project: Path, capsys: pytest.CaptureFixture[str]
                                               ) -> None:
    (project / "ctxfold.toml").write_text('[provider]\nname = "responses"\n')
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert 'model = "gpt-5.5"' in out and "context_window = 400000" in out
    assert out.count("# provider default (responses)") == 6  # the estimator is OpenAI's too
    assert 'name = "tiktoken"                        # provider default (responses)' in out
    assert main(["config", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["config"]["provider"]
    assert shown["cache_ttl_minutes"] == {"value": 10, "source": "provider default (responses)"}


def test_plugins_says_which_strategies_need_an_extra(capsys, monkeypatch) -> None:
    import importlib.util

    from ctxfold.cli.main import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "langgraph" else real(name, *a))
    assert main(["plugins", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert "langgraph" in rows["langchain-summarization"]["unavailable"]
    assert "ctxfold[peers]" in rows["langchain-summarization"]["unavailable"]
    assert rows["ctxfold"]["unavailable"] is None
    assert main(["plugins"]) == 0
    assert "[unavailable: policy 'langchain-summarization' needs" in capsys.readouterr().out


def test_show_reports_an_unknown_provider_once_and_exits_1(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It printed six problems (one per kind whose default went missing) and exited 0."""
    (project / "ctxfold.toml").write_text('[provider]\nname = "nope"\n')
    assert main(["config", "show"]) == 1
    captured = capsys.readouterr()
    assert captured.err.count("ctxfold: error:") == 1 and "configuration problems" not in (
        captured.err)
    assert "provider.name = 'nope' is not a registered provider" in captured.err
    assert '[estimator]\nname = "deepseek"' in captured.out  # the rest still resolved
