"""The glossary binds (docs/architecture.md): a retired word names nothing in ``src/``
outside the places its row lists, and there is one outcome vocabulary."""

from __future__ import annotations

import ast
import enum
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "ctxfold"


@attrs.frozen
class Retired:
    word: str
    names: frozenset[str]  # identifiers that may still use it (lower case)
    places: tuple[str, ...]  # module path prefixes, relative to src/ctxfold


def retired_words() -> list[Retired]:
    """The rows of the *Retired words* table."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("### Retired words"):]
    table = table[:table.index("\n\n", table.index("|---"))]
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]
    out = []
    for row in rows:
        word, _instead, names, places = (cell.strip() for cell in row.strip("|").split("|"))
        out.append(Retired(word, frozenset(n.lower() for n in re.findall(r"`([^`]+)`", names)),
                           tuple(re.findall(r"`([^`]+)`", places))))
    return out


def words(identifier: str) -> list[str]:
    """``snake_case`` and ``CamelCase`` split into lower-case words."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", identifier)
    return [w for w in spaced.lower().split("_") if w]


def defined_names(tree: ast.AST) -> Iterator[str]:
    """The identifiers a module defines (not those it uses from elsewhere)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.name
        elif isinstance(node, ast.arg):
            yield node.arg
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            yield node.id
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            yield node.attr
        elif isinstance(node, ast.alias) and node.asname:
            yield node.asname


def uses(identifier: str, word: str) -> bool:
    """``identifier`` has a word that starts with ``word``'s stem (``truncate``:
    ``truncated``, ``truncation``)."""
    stem = word[:-1] if word.endswith("e") else word
    return any(w.startswith(stem) for w in words(identifier))


def test_the_retired_words_table_is_read() -> None:
    rows = {r.word: r for r in retired_words()}
    assert {"review", "snip", "truncate", "compact"} <= set(rows)
    assert "compact_ratio" in rows["compact"].names
    assert rows["truncate"].places == ("plugins/policies/",)


def test_a_retired_word_names_nothing_in_src() -> None:
    found: dict[str, set[str]] = {}
    table = retired_words()
    for path in sorted(SRC.rglob("*.py")):
        where = str(path.relative_to(SRC))
        for name in set(defined_names(ast.parse(path.read_text()))):
            for row in table:
                if not uses(name, row.word) or where.startswith(row.places or ("\0",)):
                    continue
                lower = name.lower()
                if lower in row.names or any("_" in n and n in lower for n in row.names):
                    continue
                found.setdefault(f"{row.word} in {where}", set()).add(name)
    assert found == {}


@pytest.mark.parametrize(("name", "word", "expected"), [
    ("check_detail", "review", False), ("Reviewer", "review", True),
    ("PREVIEW_CHARS", "review", False), ("truncated", "truncate", True),
    ("COMPACT_RATIO_MAX", "compact", True), ("snipped", "snip", True),
])
def test_the_word_match_is_by_word_not_substring(name: str, word: str, expected: bool) -> None:
    assert uses(name, word) is expected


def test_one_outcome_vocabulary() -> None:
    """Only ``Action`` says what maintenance did: no other enum of the kernel or the engine
    spells its values (they were four enums converted into each other by string value)."""
    from ctxfold import Action

    outcomes = {a.value for a in Action} - {"none"}
    others = []
    for package in ("kernel", "engine"):
        for path in sorted((SRC / package).glob("*.py")):
            module = importlib.import_module(f"ctxfold.{package}.{path.stem}")
            for value in vars(module).values():
                if (isinstance(value, type) and issubclass(value, enum.Enum)
                        and value is not Action and value.__module__ == module.__name__
                        and outcomes & {str(m.value) for m in value}):
                    others.append(value.__qualname__)
    assert others == []
