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
        if "__getattr__" in _own_names(tree) and name not in old_packages:
            problems.append(f"{name} has a module __getattr__")
        for node in tree.body:
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


def test_every_path_of_the_previous_release_warns_and_gives_the_same_object() -> None:
    import importlib
    import sys

    import pytest

    from sleeper_ops.airflow.moved import MOVED_MODULES, MOVED_NAMES

    # the new modules first: Airflow's first import sends warnings to its logging, which pytest.warns would miss
    news = {old: [importlib.import_module(home) for home in homes] for old, homes in MOVED_MODULES.items()}
    for old, homes in MOVED_MODULES.items():
        sys.modules.pop(old, None)
        with pytest.warns(DeprecationWarning, match=f"{old} is deprecated .* import from {homes[0]}"):
            shim = importlib.import_module(old)
        modules = news[old]
        assert shim.__all__, old
        for name in shim.__all__:
            home = next((m for m in modules if name in vars(m)), None)
            assert home is not None and getattr(shim, name) is getattr(home, name), f"{old}.{name}"
    for package, names in MOVED_NAMES.items():
        module = importlib.import_module(package)
        for name, home in names.items():
            with pytest.warns(DeprecationWarning, match=f"{package}.{name} is deprecated .* from {home}"):
                value = getattr(module, name)
            assert value is getattr(importlib.import_module(home), name), f"{package}.{name}"
        with pytest.raises(AttributeError, match="SleeperNoSuchThing"):
            getattr(module, "SleeperNoSuchThing")  # noqa: B009 - the name is not there: that is the point


def test_a_dag_serialized_by_the_previous_release_still_finds_its_dated_timetable() -> None:
    # Given the timetable a previous release serialized, under its path then
    from datetime import UTC, datetime

    from airflow._shared.module_loading import qualname  # what plugins_manager keys timetables by

    from sleeper_ops.orchestration.dated_timetable import DatedImportTimetable
    from sleeper_ops.orchestration.plugin import SleeperPlugin

    old = "sleeper_ops.airflow.dated_timetable.DatedImportTimetable"
    stored = DatedImportTimetable("@daily", "UTC", datetime(2026, 1, 1, tzinfo=UTC)).serialize()
    # When Airflow looks the name up among the plugins' timetables (as decode_timetable does)
    registered = {qualname(t): t for t in SleeperPlugin.timetables}
    # Then it finds the same timetable, and it reads the stored form
    assert old in registered, sorted(registered)
    assert registered[old].deserialize(stored) == DatedImportTimetable.deserialize(stored)
