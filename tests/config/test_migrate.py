"""``migrate_file``: exactly the retired ``[agent]`` lines go, every other byte stays."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxfold import ConfigError
from ctxfold.config.migrate import migrate_file
from ctxfold.config.toml_lexer import scan_pairs
from ctxfold.kernel.compat import LEGACY_AGENT_KEYS

ML_BASIC = 'notes = """\nsoft_compact_ratio = 1\n[agent]\ncontext_editing = "x"\n"""\n'
ML_LITERAL = "notes = '''\nsoft_compact_ratio = 1\n'''\n"

# (name, original, expected after migration, removed (line, key))
CASES = [
    (
        "comments and blank lines kept",
        "# top\n\n[agent]\n# keep me\ncompact_ratio = 0.7  # trailing\n"
        "soft_compact_ratio = 0.5 # gone with its line\n\n# end\n",
        "# top\n\n[agent]\n# keep me\ncompact_ratio = 0.7  # trailing\n\n# end\n",
        [(6, "agent.soft_compact_ratio")],
    ),
    (
        "other tables, subtables and arrays of tables untouched",
        "[other]\nsoft_compact_ratio = 1\n[agent]\ncontext_editing = 'native'\n"
        "[agent.sub]\nsoft_compact_ratio = 1\n[[runs]]\ncompact_force_ratio = 0.9\n",
        "[other]\nsoft_compact_ratio = 1\n[agent]\n"
        "[agent.sub]\nsoft_compact_ratio = 1\n[[runs]]\ncompact_force_ratio = 0.9\n",
        [(4, "agent.context_editing")],
    ),
    (
        "multi-line basic string content is not a key",
        "[agent]\n" + ML_BASIC + "cold_resume_prune = true\n",
        "[agent]\n" + ML_BASIC,
        [(7, "agent.cold_resume_prune")],
    ),
    (
        "multi-line literal string content is not a key",
        "[agent]\n" + ML_LITERAL + "tool_result_snip_ratio = 0.6\n",
        "[agent]\n" + ML_LITERAL,
        [(5, "agent.tool_result_snip_ratio")],
    ),
    (
        "multi-line values are removed whole",
        "[agent]\ncontext_editing = \"\"\"\nmulti\nline\"\"\"\nsoft_compact_ratio = [\n"
        "  1, # one\n  2,\n]\neffort = \"low\"\n",
        "[agent]\neffort = \"low\"\n",
        [(2, "agent.context_editing"), (5, "agent.soft_compact_ratio")],
    ),
    (
        "dotted and quoted keys",
        'agent.soft_compact_ratio = 1\n"agent".compact_force_ratio = 0.9\n'
        "agent . 'context_editing' = \"x\"\nagent.compact_ratio = 0.8\n"
        "other.soft_compact_ratio = 1\n",
        "agent.compact_ratio = 0.8\nother.soft_compact_ratio = 1\n",
        [(1, "agent.soft_compact_ratio"), (2, "agent.compact_force_ratio"),
         (3, "agent.context_editing")],
    ),
    (
        "quoted keys and header spelling",
        '[ "agent" ]\n"soft_compact_ratio" = 1\n\'cold_resume_prune\' = false\n'
        '"soft\\u005fcompact_ratio_x" = 2\ncompact_ratio = 0.8\n',
        '[ "agent" ]\n"soft\\u005fcompact_ratio_x" = 2\ncompact_ratio = 0.8\n',
        [(2, "agent.soft_compact_ratio"), (3, "agent.cold_resume_prune")],
    ),
    (
        "CRLF line endings",
        "[agent]\r\ncompact_ratio = 0.8\r\nsoft_compact_ratio = 0.5\r\n# c\r\n",
        "[agent]\r\ncompact_ratio = 0.8\r\n# c\r\n",
        [(3, "agent.soft_compact_ratio")],
    ),
    (
        "no trailing newline",
        "[agent]\nsoft_compact_ratio = 0.5\ncompact_ratio = 0.8",
        "[agent]\ncompact_ratio = 0.8",
        [(2, "agent.soft_compact_ratio")],
    ),
    (
        "removed pair is the last line without newline",
        "[agent]\ncompact_ratio = 0.8\nsoft_compact_ratio = 0.5",
        "[agent]\ncompact_ratio = 0.8\n",
        [(3, "agent.soft_compact_ratio")],
    ),
    (
        "BOM and indentation",
        "\ufeff[agent]\n  soft_compact_ratio = 0.5\n\tcompact_ratio = 0.8\n",
        "\ufeff[agent]\n\tcompact_ratio = 0.8\n",
        [(2, "agent.soft_compact_ratio")],
    ),
]


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


@pytest.mark.parametrize(("name", "original", "expected", "removed"), CASES,
                         ids=[c[0] for c in CASES])
def test_migrate_removes_exactly_the_legacy_lines(
    tmp_path: Path, name: str, original: str, expected: str, removed: list[Any]
) -> None:
    path = _write(tmp_path / "ctxfold.toml", original)
    result = migrate_file(path)
    assert result.changed
    assert result.removed == removed
    assert path.read_bytes() == expected.encode("utf-8")
    tomllib.loads(expected.removeprefix("\ufeff"))


def test_permissions_kept_and_second_run_is_a_no_op(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.toml", "[agent]\nsoft_compact_ratio = 0.5\n")
    path.chmod(0o640)
    assert migrate_file(path).changed
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    again = migrate_file(path)
    assert not again.changed and again.removed == [] and again.diff == ""
    assert path.stat().st_mtime_ns == 1_000_000_000
    assert path.read_bytes() == b"[agent]\n"


def test_dry_run_prints_diff_and_writes_nothing(tmp_path: Path) -> None:
    original = "[agent]\ncompact_ratio = 0.8\nsoft_compact_ratio = 0.5"
    path = _write(tmp_path / "c.toml", original)
    result = migrate_file(path, dry_run=True)
    assert result.changed
    assert "-soft_compact_ratio = 0.5\n\\ No newline at end of file\n" in result.diff
    assert path.read_bytes() == original.encode()
    assert not (tmp_path / ".c.toml.lock").exists()


def test_symlink_is_followed(tmp_path: Path) -> None:
    real = _write(tmp_path / "real.toml", "[agent]\ncontext_editing = 'x'\n")
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    migrate_file(link)
    assert link.is_symlink()
    assert real.read_text() == "[agent]\n"


def test_inline_table_key_is_reported_not_removed(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.toml", "agent = { soft_compact_ratio = 1, compact_ratio = 0.8 }\n")
    result = migrate_file(path)
    assert not result.changed
    assert result.kept == ["agent.soft_compact_ratio"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [("[agent\nx = 1\n", "line 1"), (None, "does not exist")],
)
def test_errors_name_the_file(tmp_path: Path, text: str | None, needle: str) -> None:
    path = tmp_path / "bad.toml"
    if text is not None:
        _write(path, text)
    with pytest.raises(ConfigError) as info:
        migrate_file(path)
    assert str(path) in str(info.value) and needle in str(info.value)


def test_scan_pairs_reports_full_paths_and_lines() -> None:
    pairs = scan_pairs('a = 1\n[t]\nb.c = """\nx = 1\n"""\n[[arr]]\nd = [1,\n 2]\n')
    assert [(p.path, p.line, p.array_header) for p in pairs] == [
        (("a",), 1, False), (("t", "b", "c"), 3, False), (("arr", "d"), 7, True)]


# -- property test ---------------------------------------------------------------------------

_VALUES = st.sampled_from([
    "1", "0.5", "true", '"text # not a comment"', "'literal'", '"esc \\" quote"',
    '"""\nsoft_compact_ratio = 1\n[agent]\n"""', "'''\ncontext_editing = 2\n'''",
    '"""two quotes at end"""""', "[\n  1, # c\n  2,\n]", '{ x = 1, y = "}" }',
    "1979-05-27 07:32:00", '["a", "b"]',
])
_TRAIL = st.sampled_from(["", "  # note", " #soft_compact_ratio = 1"])
_INDENT = st.sampled_from(["", "  ", "\t"])
_FILLER = st.sampled_from(["# a comment", "", "   ", "# soft_compact_ratio = 0.5"])
_KEY_STYLES = [lambda k: k, lambda k: f'"{k}"', lambda k: f"'{k}'"]


@st.composite
def _block(draw: Any, names: list[str], legacy: bool, prefix: str = "") -> list[tuple[str, bool]]:
    """Lines of one table body: ``(line without EOL, removed?)``."""
    lines: list[tuple[str, bool]] = []
    for name in names:
        for _ in range(draw(st.integers(0, 1))):
            lines.append((draw(_FILLER), False))
        style = draw(st.sampled_from(_KEY_STYLES))
        key = style(name)
        if prefix:
            key = draw(st.sampled_from([f"{prefix}.{key}", f'"{prefix}".{key}',
                                        f"{prefix} . {key}"]))
        line = f"{draw(_INDENT)}{key} = {draw(_VALUES)}{draw(_TRAIL)}"
        lines.append((line, legacy and name in LEGACY_AGENT_KEYS))
    return lines


_NAMES = st.lists(
    st.sampled_from([*LEGACY_AGENT_KEYS, "compact_ratio", "soft_compact_ratio_old", "notes",
                     "x-y"]),
    unique=True, max_size=6,
)


@st.composite
def _documents(draw: Any) -> tuple[str, str, set[tuple[str, str]]]:
    lines: list[tuple[str, bool]] = []
    dotted_agent = draw(st.booleans())
    lines += draw(_block(draw(st.lists(st.sampled_from(["title", "n"]), unique=True)), False))
    if dotted_agent:  # top-level `agent.key = ...` (then no [agent] header may follow)
        lines += draw(_block(draw(_NAMES), True, prefix="agent"))
    tables = ["other", "agent.sub", "[arr]"] + ([] if dotted_agent else ["agent"])
    for table in draw(st.permutations(tables)):
        if dotted_agent and table == "agent.sub":
            continue
        lines.append((f"[{table}]", False))
        lines += draw(_block(draw(_NAMES), table == "agent"))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    pieces = [(line + eol, removed) for line, removed in lines]
    if pieces and draw(st.booleans()):  # no final newline
        last, removed = pieces[-1]
        pieces[-1] = (last[: -len(eol)], removed)
    bom = "\ufeff" if draw(st.booleans()) else ""
    original = bom + "".join(p for p, _ in pieces)
    expected = bom + "".join(p for p, removed in pieces if not removed)
    return original, expected, {("agent", k) for k in LEGACY_AGENT_KEYS}


def _without(data: dict[str, Any]) -> dict[str, Any]:
    agent = data.get("agent")
    if isinstance(agent, dict):
        agent = {k: v for k, v in agent.items() if k not in LEGACY_AGENT_KEYS}
        data = {**data, "agent": agent}
        if not agent and "agent" in data:
            data.pop("agent")
    return data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(doc=_documents())
def test_property_only_legacy_lines_removed(tmp_path: Path, doc: Any) -> None:
    original, expected, _ = doc
    tomllib.loads(original.removeprefix("\ufeff"))  # the generator only makes valid TOML
    path = tmp_path / "prop.toml"
    path.write_bytes(original.encode("utf-8"))
    result = migrate_file(path)
    after = path.read_bytes().decode("utf-8")
    assert after == expected
    assert result.changed == (original != expected)
    parsed_before = tomllib.loads(original.removeprefix("\ufeff"))
    parsed_after = tomllib.loads(after.removeprefix("\ufeff"))
    assert _without(parsed_after) == _without(parsed_before)
    assert not migrate_file(path).changed


def test_array_of_agent_tables_is_not_the_agent_table(tmp_path: Path) -> None:
    original = "[[agent]]\nsoft_compact_ratio = 1\n[[agent]]\ncontext_editing = 'x'\n"
    path = _write(tmp_path / "c.toml", original)
    assert not migrate_file(path).changed
    assert path.read_text() == original


def test_migrate_leaves_no_lock_file_beside_the_config(tmp_path: Path) -> None:
    path = _write(tmp_path / "ctxfold.toml", "[agent]\nsoft_compact_ratio = 0.5\n")
    assert migrate_file(path).changed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctxfold.toml"]
