"""One name for each table property: the library names a property only through its
registry constant (``statestore.properties``), never by a ``"sleeper.table.*"`` literal."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ("plugins", "statestore", "dags", "spark_apps")
REGISTRY = ROOT / "statestore" / "properties"
PREFIX = "sleeper.table."


def _literals(path: Path) -> list[str]:
    """``path:line: text`` for each string literal in ``path`` that starts a property name
    (an f-string counts by its leading text)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and node.values:
            head = node.values[0]
            text = head.value if isinstance(head, ast.Constant) and isinstance(head.value, str) else ""
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if text.startswith(PREFIX):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text!r}")
    return sorted(set(found))


def test_no_property_name_literal_outside_the_registry():
    files = [p for top in LIBRARY for p in sorted((ROOT / top).rglob("*.py"))
             if REGISTRY not in p.parents and p != REGISTRY.with_suffix(".py")]
    assert files, "no library files found"
    found = [hit for p in files for hit in _literals(p)]
    assert not found, ("name a table property by its constant in statestore.properties, not a literal:\n"
                       + "\n".join(found))
