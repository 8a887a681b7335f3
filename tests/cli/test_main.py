"""The command's conventions: usage errors exit 2 everywhere, ``--config`` on either side."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxfold.cli.main import main

USAGE_ERRORS = [
    ["replay", "--demo", "--window", "-5"],
    ["replay", "--demo", "--compact-ratio", "2"],
    ["replay", "--demo", "--policy", "nope"],
    ["replay", "--demo", "--profile", "nope"],
    ["replay"],
    ["emulate", "--fault", "bogus"],
    ["emulate", "--fault", "rate_limit@x"],
    ["emulate", "--port", "70000"],
    ["emulate", "--window", "0"],
    ["tool-result", "s", "c", "--limit", "0"],
    ["tool-result", "s", "c", "--limit", "999999"],
    ["tool-result", "s", "c", "--offset", "-1"],
    ["estimate", "x.jsonl", "--estimator", "nope"],
    ["estimate", "x.jsonl", "--format", "nope"],
    ["smoke", "seed", "--max-usd", "-1"],
    ["smoke", "seed", "--max-usd", "nan"],
    ["inspect", "--window", "abc", "demo"],
    ["sessions", "rewind", "demo", "x"],  # argparse's own
    ["nope"],
]


def exit_code(argv: list[str]) -> int:
    """What the console script would exit with (argparse's own errors raise SystemExit)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.parametrize("argv", USAGE_ERRORS, ids=" ".join)
def test_usage_errors_exit_2_and_say_what_was_wrong(argv: list[str], tmp_path: Path,
                                                    monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()  # argparse's usage (wrapped) and one error line
    assert "error:" in lines[-1] and len(lines) <= 5


def test_a_bad_config_file_is_not_a_usage_error(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.toml").write_text("[agent]\ncompact_ratio = 7\n")
    assert main(["--config", "bad.toml", "inspect", "--window", "1000", "demo"]) == 1
    assert "bad.toml" in capsys.readouterr().err


@pytest.mark.parametrize("before", [True, False])
def test_config_is_accepted_before_or_after_the_subcommand(before: bool, tmp_path: Path,
                                                           monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.toml").write_text('[provider]\nname = "mimo"\n')
    argv = ["config", "show", "--json"]
    argv = ["--config", "mine.toml", *argv] if before else [*argv, "--config", "mine.toml"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert '"mimo"' in out and "mine.toml" in out


def test_config_after_a_nested_action_wins_over_the_one_before(tmp_path: Path, monkeypatch,
                                                               capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.toml").write_text('[provider]\nname = "mimo"\n')
    (tmp_path / "b.toml").write_text('[provider]\nname = "responses"\n')
    assert main(["--config", "a.toml", "config", "show", "--json", "--config", "b.toml"]) == 0
    out = capsys.readouterr().out
    assert '"responses"' in out and '"mimo"' not in out


@pytest.mark.parametrize(("argv", "usage", "says"), [
    (["--bogus"], "usage: ctxfold [-h]", "unrecognized arguments: --bogus"),
    (["sessions", "list", "--bogus"], "usage: ctxfold sessions list",
     "ctxfold sessions list: error: unrecognized arguments: --bogus"),
    (["inspect", "s", "--nope", "x"], "usage: ctxfold inspect",
     "ctxfold inspect: error: unrecognized arguments: --nope x"),
    ([], "usage: ctxfold [-h]", "a command is required"),
])
def test_an_unknown_option_is_named_by_the_command_that_got_it(
        argv: list[str], usage: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`ctxfold --bogus` said a command was required, and subcommands printed the top-level
    usage for an option they did not know."""
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(usage) and says in err
