"""Every package of the checkout is listed in pyproject's ``[tool.setuptools] packages``:
one left out is missing from the wheel (a non-editable ``pip install .``), while the
editable checkout still finds it. ``tests/integration/test_install.py`` builds the wheel
and shows the same; this check says it in a second."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_package_of_the_checkout_is_listed_for_the_wheel() -> None:
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = set()
    for root, top in (("plugins/sleeper_ops", "sleeper_ops"), ("statestore", "statestore")):
        for init in (REPO / root).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / root).as_posix()
            on_disk.add(top if rel == "." else f"{top}.{rel.replace('/', '.')}")
    assert sorted(on_disk - listed) == [], "add these to [tool.setuptools] packages in pyproject.toml"
