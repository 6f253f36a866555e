"""statestore's import graph has no cycle, counting imports under ``TYPE_CHECKING``
(a type-only import still ties the two modules: neither can be read, moved or
replaced without the other)."""

from __future__ import annotations

import grimp

from tests.unit.test_layering import _cycles


def test_statestore_has_no_import_cycle_even_through_type_checking_imports() -> None:
    graph = grimp.build_graph("statestore", exclude_type_checking_imports=False, cache_dir=None)
    reexports = [(package, child) for package in graph.modules for child in graph.find_children(package)
                 if graph.direct_import_exists(importer=package, imported=child)]
    for importer, imported in reexports:  # a package's __init__ re-exporting its modules: not a cycle of concern
        graph.remove_import(importer=importer, imported=imported)
    cycles = _cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)
