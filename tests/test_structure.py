"""The kernel names no built-in plugin (layering is lint-imports). Modules are sized by
concept, not by a line count: the line caps this file once held split one algorithm over
many modules, and are retired (docs/architecture.md)."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "ctxfold"


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
    from ctxfold import Registry
    from ctxfold.kernel.plugin_manager import builtin_plugin_modules

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


def test_the_fold_path_does_no_io() -> None:
    """``kernel/maintenance.py`` imports nothing that reads or writes: every effect is a
    step its driver performs (docs/architecture.md, "The fold path")."""
    import ast

    tree = ast.parse((SRC / "kernel" / "maintenance.py").read_text())
    imported = {
        alias.name if isinstance(node, ast.Import) else str(node.module)
        for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    outside = {m for m in imported if not m.startswith("ctxfold.kernel")}
    assert outside <= {"__future__", "enum", "math", "time", "collections.abc", "typing",
                       "attrs"}
    from ctxfold.kernel import maintenance

    assert "Committer" not in vars(maintenance)  # the writes are the engine's


def test_architecture_lists_every_kernel_and_engine_module() -> None:
    """The module tables of docs/architecture.md name exactly the modules there are."""
    import re

    text = (SRC.parents[1] / "docs" / "architecture.md").read_text()
    for package, heading in (("kernel", "## Kernel modules"), ("engine", "## Engine")):
        section = text[text.index(heading):]
        section = section[:section.index("\n## ", 1)]
        listed = set(re.findall(r"^\| `([a-z_]+\.py)`", section, re.MULTILINE))
        present = {p.name for p in (SRC / package).glob("*.py") if p.name != "__init__.py"}
        assert listed == present, package
