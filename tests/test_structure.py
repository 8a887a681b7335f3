"""Module size limits: small modules, a kernel well under 4,000 lines, and a kernel that names no
built-in plugin (layering is lint-imports)."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "ctxfold"
#: "No module over ~300 lines": the aim is 300; this is where a change must split a module.
MODULE_LIMIT = 310
#: The one exception: the ContextManager is read in one file (its behaviour lives in the
#: kernel and the engine's parts; what is left is the class itself).
EXCEPTIONS = {"engine/manager.py": 355}
#: "Well under 4k lines": the kernel holds the rules only (transport, interop, sidecar
#: loading, message checks and the plugins live outside it). Raised from 3,800 for issue 29
#: (AppendError, Appended.replayed, the store timeouts, folding again after a lost install).
KERNEL_LIMIT = 3825


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_module_is_over_the_limit() -> None:
    sizes = {str(p.relative_to(SRC)): lines(p) for p in SRC.rglob("*.py")}
    assert sizes
    assert {name: n for name, n in sizes.items()
            if n > EXCEPTIONS.get(name, MODULE_LIMIT)} == {}


def test_the_kernel_stays_small() -> None:
    assert sum(lines(p) for p in (SRC / "kernel").glob("*.py")) < KERNEL_LIMIT


def _string_literals(path: Path) -> set[str]:
    """The string constants of a module's code (docstrings left out)."""
    import ast

    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value) for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in docstrings
    }


def test_the_kernel_names_no_built_in_plugin() -> None:
    from ctxfold.kernel.plugin_manager import builtin_plugin_modules
    from ctxfold.kernel.registry import Registry

    registry = Registry.from_config(load_entry_points=False)
    builtins = {spec.name for spec in registry.specs() if spec.source.startswith("builtin:")}
    builtins.discard("ctxfold")  # the replay policy of that name is also the project's name
    modules = set(builtin_plugin_modules()) | {"ctxfold.plugins"}
    assert {"head-tail", "v3", "emulator", "ctxfold.plugins.stores.fs"} <= builtins | modules
    named = {
        str(p.relative_to(SRC)): sorted(_string_literals(p) & (builtins | modules))
        for p in (SRC / "kernel").glob("*.py")
    }
    assert {module: names for module, names in named.items() if names} == {}
