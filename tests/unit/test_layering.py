"""The import rules of docs/LAYERING.md hold, and the check can fail.

The rules are import-linter contracts in ``.importlinter`` (run here through the
venv's ``lint-imports``); cycles are found here from grimp's import graph, since
import-linter has no contract for them. Imports inside functions count, and so do
imports under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = {"statestore": REPO / "statestore", "sleeper_ops": REPO / "plugins" / "sleeper_ops"}


def _lint_imports(cwd: Path, pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run([str(LINT_IMPORTS), "--config", str(cwd / ".importlinter"), "--no-cache"], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


def test_every_import_contract_is_kept() -> None:
    proc = _lint_imports(REPO)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_a_core_module_importing_an_adapter_breaks_the_contracts(tmp_path: Path) -> None:
    # Given a copy of the packages in which io.storage (core) imports the Airflow adapter
    for name, src in PACKAGES.items():
        shutil.copytree(src, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / ".importlinter", tmp_path / ".importlinter")
    storage = tmp_path / "sleeper_ops" / "io" / "storage.py"
    storage.write_text(storage.read_text() + "\n\ndef _bad() -> None:\n    import sleeper_ops.airflow.task_runner\n")
    # When the contracts are checked against the copy, Then they fail and name the import
    proc = _lint_imports(tmp_path, pythonpath=str(tmp_path))
    assert proc.returncode != 0
    assert "sleeper_ops.io.storage -> sleeper_ops.airflow.task_runner" in proc.stdout


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in graph.modules:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        component.append(m)
                        if m == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def test_no_import_cycles() -> None:
    """No cycle in statestore and sleeper_ops together (statestore's own included: it
    imports nothing of ours), counting imports under ``TYPE_CHECKING``: a type-only
    import still ties two modules."""
    graph = grimp.build_graph("statestore", "sleeper_ops", exclude_type_checking_imports=False, cache_dir=None)
    # a package's __init__ re-exporting its own modules is not a cycle of concern
    for package in [m for m in graph.modules if graph.find_children(m)]:
        for child in graph.find_children(package):
            if graph.direct_import_exists(importer=package, imported=child):
                graph.remove_import(importer=package, imported=child)
    cycles = _cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for m in ("a", "b", "c", "d"):
        graph.add_module(m)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    graph.add_import(importer="c", imported="a")
    graph.add_import(importer="c", imported="d")
    assert _cycles(graph) == [["a", "b", "c"]]
