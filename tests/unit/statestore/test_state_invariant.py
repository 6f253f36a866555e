"""TableState's reference invariant lives in one place: only ``statestore/state.py``
writes a state's ``references`` and their ``refs_by_file`` index; every loader and
transaction goes through ``TableState.put_references``, ``remove_reference`` or
``clear_references``."""

from __future__ import annotations

import ast
from pathlib import Path

from statestore.files import FileReference
from statestore.state import TableState

STATESTORE = Path(__file__).resolve().parents[3] / "statestore"
_MUTATORS = {"clear", "pop", "popitem", "setdefault", "update", "add", "discard", "remove"}


def _writes(tree: ast.AST) -> list[int]:
    """Lines that write an attribute ``refs_by_file`` or ``references`` (by item, by a
    mutating method, or by taking ``refs_by_file`` to write through a local name)."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or node.attr not in ("refs_by_file", "references"):
            continue
        up = parents.get(node)
        if isinstance(up, ast.Subscript) and isinstance(up.ctx, (ast.Store, ast.Del)):
            out.append(node.lineno)
        elif isinstance(up, ast.Attribute) and up.attr in _MUTATORS:
            out.append(node.lineno)
        elif isinstance(node.ctx, (ast.Store, ast.Del)) or (node.attr == "refs_by_file" and not (
                isinstance(up, ast.Compare) or (isinstance(up, ast.Attribute) and up.attr == "get"))):
            out.append(node.lineno)
    return out


def test_only_the_state_module_writes_references_and_their_index() -> None:
    found = {str(p.relative_to(STATESTORE.parent)): lines for p in sorted(STATESTORE.rglob("*.py"))
             if p.name != "state.py" or p.parent != STATESTORE
             if (lines := _writes(ast.parse(p.read_text(), str(p))))}
    assert not found, f"references or refs_by_file written outside statestore/state.py: {found}"


def test_the_check_sees_an_inline_copy_of_the_index() -> None:
    inline = "by_file = state.refs_by_file\nstate.references[k] = ref\nstate.refs_by_file.clear()\n"
    assert _writes(ast.parse(inline)) == [1, 2, 3]


def test_put_references_indexes_every_reference_by_file() -> None:
    state = TableState()
    state.put_references([FileReference("f", "a", 1), FileReference("f", "b", 2), FileReference("g", "a", 3)])
    assert state.refs_by_file == {"f": {"a", "b"}, "g": {"a"}}
    state.remove_reference("f", "a")
    state.clear_references()
    assert state.references == {} and state.refs_by_file == {}
