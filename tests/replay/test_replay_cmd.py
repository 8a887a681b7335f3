"""`ctxfold replay` argument handling: directories, bad paths, report file modes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ctxfold import Registry
from ctxfold.cli.main import main
from ctxfold.cli.replay_cmd import profile_window
from ctxfold.importing import expand_paths

TRANSCRIPTS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "transcripts"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "importers"


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry.from_config(load_entry_points=False)


def test_a_folder_of_sessions_is_walked(registry: Registry, tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("About <claude-session> exports.")
    (tmp_path / "notes.xml").write_text("Notes: the <claude-session> tag is the root.")
    for name in ("openai.jsonl", "mini_v2.traj.json"):
        (tmp_path / name).write_bytes((FIXTURES / name).read_bytes())
    found = expand_paths([str(tmp_path)], registry, None)
    assert sorted(p.name for p in found) == ["mini_v2.traj.json", "notes.xml", "openai.jsonl"]


@pytest.mark.skipif(not TRANSCRIPTS.is_dir(), reason=f"{TRANSCRIPTS} is absent")
def test_the_shared_transcripts_folder_expands_to_every_session(registry: Registry) -> None:
    found = expand_paths([str(TRANSCRIPTS)], registry, None)
    assert len(found) >= 10
    assert not any(p.name == "README.md" for p in found)


def test_readme_mentioning_the_xml_root_is_not_an_export(registry: Registry,
                                                         tmp_path: Path) -> None:
    from ctxfold import ImporterError
    from ctxfold.importing import detect_format

    readme = tmp_path / "README.xml"
    readme.write_text("This folder holds a <claude-session> export.\n")
    with pytest.raises(ImporterError):
        detect_format(readme, registry)
    assert detect_format(FIXTURES / "claude_code.xml", registry) == "claude-code-xml"


def test_one_bad_session_does_not_hide_the_others(tmp_path: Path, capsys) -> None:
    good = tmp_path / "good.jsonl"
    good.write_bytes((FIXTURES / "openai.jsonl").read_bytes())
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    out = tmp_path / "r.json"
    code = main(["replay", str(good), str(bad), "--policy", "append-only",
                 "--estimator", "heuristic", "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 1
    assert "bad.json" in captured.err
    assert out.exists() and "good" in out.read_text()


def test_reports_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        out = tmp_path / "r.html"
        assert main(["replay", "--demo", "--policy", "append-only", "--html", str(out)]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


def test_window_defaults_to_the_profile_and_zero_is_refused(capsys) -> None:
    assert profile_window("openai") < profile_window("deepseek-flash")
    assert main(["replay", "--demo", "--window", "0"]) == 2  # a usage error
    assert "--window 0" in capsys.readouterr().err


def test_report_paths_are_checked_before_the_replay(tmp_path: Path, capsys) -> None:
    import time

    started = time.monotonic()
    code = main(["replay", "--demo", "--json", str(tmp_path / "missing" / "r.json")])
    assert code == 2 and time.monotonic() - started < 5  # refused before any work
    assert "does not exist" in capsys.readouterr().err
    assert main(["replay", "--demo", "--html", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "value"), [("--reserve-output", "-1"),
                                             ("--reserve-output", "40000"),
                                             ("--summary-tokens", "10")])
def test_fairness_switches_are_validated(flag: str, value: str, capsys) -> None:
    assert main(["replay", "--demo", flag, value]) == 2
    assert flag in capsys.readouterr().err


def test_unavailable_policies_are_named_not_silently_dropped(tmp_path: Path, capsys) -> None:
    from ctxfold import Registry, StrategySpec, hookimpl

    class Plugin:
        @hookimpl
        def ctxfold_policies(self):
            return [StrategySpec(name="needs-nothing-real",
                                 factory=lambda ctx: None, requires=("no_such_module_xyz",),
                                 install="pip install no-such-thing")]

    registry = Registry.from_config(load_entry_points=False, extra_plugins=[Plugin()])
    assert "needs-nothing-real" not in registry.available("policy")
    why = registry.unavailable("policy")["needs-nothing-real"]
    assert "no_such_module_xyz" in why and "pip install no-such-thing" in why
    from ctxfold import Config, PluginError

    with pytest.raises(PluginError, match="no_such_module_xyz"):
        registry.create("policy", "needs-nothing-real", config=Config())


def test_a_terminal_gets_one_line_per_finished_session(monkeypatch, capsys) -> None:
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["replay", "--demo", "--policy", "append-only", "--json", "-"]) == 0
    err = capsys.readouterr().err
    assert "[1/1] demo: 154 requests" in err and "failed: append-only" in err
