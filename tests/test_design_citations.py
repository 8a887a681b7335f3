"""The design lives in the repository (issue 26): the code and its tests cite ``docs/design.md``
by its numbered sections, every ``design §N.M`` names a heading that exists, and no citation of
the documents that stayed outside the repository (``SPEC §``, ``origin §``) comes back."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
#: Where citations live: the code, the docs, the benchmark scripts, the tests.
CITING = (("src", "*.py"), ("docs", "*.md"), ("benchmarks", "*.py"), ("tests", "*.py"))
#: This file names the patterns it looks for (and a bogus citation) on purpose.
CHECKER = Path(__file__).resolve()

#: ``## 1. The transcript`` / ``### 1.2 Session ids`` → "1" / "1.2".
HEADING = re.compile(r"^#{2,6} (\d+(?:\.\d+)*)\.? ", re.MULTILINE)
#: ``design §2.5``, ``design §4.1–§4.3, §4.7``, ``Design §2.4, §2.5``: the first section and
#: the ones listed right after it.
CITATION = re.compile(r"\b[Dd]esign §(\d+(?:\.\d+)*)((?:(?:, |–| and )§\d+(?:\.\d+)*)*)")
SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
#: Citations of the documents that are not in the repository.
OUTSIDE = re.compile(r"\bSPEC\s*(?:§|invariant|inv\.)|\b[Oo]rigin\s*§|\[origin\b|\bseed §")


def design_sections(text: str) -> list[str]:
    return HEADING.findall(text)


def citations(text: str) -> Iterator[tuple[int, str]]:
    """(line, section) for every section a ``design §`` citation in ``text`` names."""
    for match in CITATION.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        yield line, match.group(1)
        for section in SECTION.findall(match.group(2)):
            yield line, section


def citing_files() -> Iterator[Path]:
    for folder, pattern in CITING:
        yield from (path for path in sorted((ROOT / folder).rglob(pattern))
                    if path.resolve() != CHECKER)


def unresolved(sections: set[str], files: Iterator[Path]) -> list[tuple[str, int, str]]:
    """(file, line, section) of every citation of a section ``docs/design.md`` lacks."""
    return [
        (path.name if not path.is_relative_to(ROOT) else str(path.relative_to(ROOT)), line,
         section)
        for path in files
        for line, section in citations(path.read_text(encoding="utf-8"))
        if section not in sections
    ]


def test_design_sections_are_numbered_once_and_nest() -> None:
    sections = design_sections(DESIGN.read_text(encoding="utf-8"))
    assert len(sections) > 20
    assert len(sections) == len(set(sections)), "a section number is used twice"
    for section in sections:
        parent = section.rpartition(".")[0]
        assert not parent or parent in sections, f"§{section} has no parent §{parent}"


def test_every_design_citation_names_a_section() -> None:
    sections = set(design_sections(DESIGN.read_text(encoding="utf-8")))
    cited = [s for path in citing_files() for _, s in citations(path.read_text(encoding="utf-8"))]
    assert len(cited) > 100, "the citations were not found: has the pattern drifted?"
    assert unresolved(sections, citing_files()) == []


def test_a_bogus_citation_is_caught(tmp_path: Path) -> None:
    sections = set(design_sections(DESIGN.read_text(encoding="utf-8")))
    bogus = tmp_path / "bogus.py"
    bogus.write_text('"""Folds (design §4.1–§4.99, §2.5)."""\n# see design §99\n')
    assert unresolved(sections, iter([bogus])) == [("bogus.py", 1, "4.99"), ("bogus.py", 2, "99")]


def test_the_tests_are_scanned_too() -> None:
    scanned = set(citing_files())
    assert ROOT / "tests" / "kernel" / "test_fold.py" in scanned
    assert CHECKER not in scanned


def test_no_citation_of_documents_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for path in citing_files()
        for text in [path.read_text(encoding="utf-8")]
        for m in OUTSIDE.finditer(text)
    ]
    assert found == [], "cite docs/design.md (design §N.M) instead"
