"""Module size limits: small modules, a kernel under 4,000 lines (layering is lint-imports)."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "ctxfold"
#: "No module over ~300 lines": the aim is 300; this is where a change must split a module.
MODULE_LIMIT = 350
KERNEL_LIMIT = 4000


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_module_is_over_the_limit() -> None:
    sizes = {str(p.relative_to(SRC)): lines(p) for p in SRC.rglob("*.py")}
    assert sizes
    assert {name: n for name, n in sizes.items() if n > MODULE_LIMIT} == {}


def test_the_kernel_stays_small() -> None:
    assert sum(lines(p) for p in (SRC / "kernel").glob("*.py")) < KERNEL_LIMIT
