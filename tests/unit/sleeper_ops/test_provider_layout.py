"""The provider is laid out like the official ones: each class lives in one module of its
kind's folder, no module re-exports another's names or builds them in a module
``__getattr__``, and every path a user imported before the layout changed still gives
the same object, with a DeprecationWarning (:mod:`sleeper_ops.airflow.moved`)."""

from __future__ import annotations

import ast
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[3] / "plugins"
PACKAGES = ("sleeper_ops/airflow", "sleeper_ops/orchestration")


def _modules() -> dict[str, ast.Module]:
    out = {}
    for package in PACKAGES:
        for path in sorted((PLUGINS / package).rglob("*.py")):
            name = ".".join(path.relative_to(PLUGINS).with_suffix("").parts).removesuffix(".__init__")
            out[name] = ast.parse(path.read_text(), str(path))
    return out


def _deprecated() -> tuple[set[str], set[str]]:
    """The shim modules and the packages that keep old names, as sleeper_ops.airflow.moved lists them."""
    try:
        from sleeper_ops.airflow.moved import MOVED_MODULES, MOVED_NAMES
    except ImportError:  # before the shims
        return set(), set()
    return set(MOVED_MODULES), set(MOVED_NAMES)


def _own_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_no_provider_module_re_exports_or_builds_names_of_another() -> None:
    shims, old_packages = _deprecated()
    problems = []
    for name, tree in _modules().items():
        if name in shims:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__" and name not in old_packages:
                problems.append(f"{name} has a module __getattr__")
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                    for t in node.targets):
                foreign = sorted(set(ast.literal_eval(node.value)) - _own_names(tree))
                if foreign:
                    problems.append(f"{name} re-exports {', '.join(foreign)} in __all__")
    for package in PACKAGES:
        for path in sorted((PLUGINS / package).rglob("*.py")):
            name = ".".join(path.relative_to(PLUGINS).with_suffix("").parts).removesuffix(".__init__")
            if name not in shims and "noqa: F401" in path.read_text():
                problems.append(f"{name} re-exports an import (noqa: F401)")
    assert problems == []
