"""docs/LAYERING.md's tree names every package and module at the top of ``statestore`` and
``sleeper_ops``, and nothing that is not there.

The tree is the fenced block at the top of the page. Under ``statestore/`` and
``plugins/sleeper_ops/`` each entry line is indented two spaces and opens with its names,
comma-separated (``name``, ``name.py`` or ``name/``, optionally followed by a note in
parentheses), then two or more spaces and what they hold; deeper-indented lines continue
the description. Only depth 1 is checked: a package's own modules are its own business.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "LAYERING.md"
ROOTS = {"statestore/": REPO / "statestore", "plugins/sleeper_ops/": REPO / "plugins" / "sleeper_ops"}
NAME = re.compile(r"([a-z_][a-z0-9_]*)(?:\.py|/)?(?: \(.*\))?")


def _on_disk(root: Path) -> set[str]:
    """The names of the packages and modules directly under ``root``."""
    names = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    names |= {p.stem for p in root.glob("*.py") if p.name != "__init__.py"}
    return names


def _in_tree(text: str) -> tuple[dict[str, set[str]], list[str]]:
    """The names each root's entries list in the page's first fenced block, and the
    name columns that are not a comma-separated list of names."""
    block = text.split("```", 2)[1]
    named: dict[str, set[str]] = {root: set() for root in ROOTS}
    unreadable: list[str] = []
    root = None
    for line in block.splitlines():
        if line and not line[0].isspace():
            head = line.split()[0]
            root = head if head in ROOTS else None
        elif root is not None and re.match(r"  \S", line):
            column = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
            for token in column.split(", "):
                match = NAME.fullmatch(token)
                if match:
                    named[root].add(match.group(1))
                else:
                    unreadable.append(f"{root}: {column!r}")
    return named, unreadable


def test_the_layering_tree_names_exactly_the_packages_and_modules_on_disk() -> None:
    named, unreadable = _in_tree(DOC.read_text())
    differences = [f"unreadable entry {entry}" for entry in unreadable]
    for root, path in ROOTS.items():
        on_disk = _on_disk(path)
        differences += [f"{root}{name} is not in the tree" for name in sorted(on_disk - named[root])]
        differences += [f"{root}{name} is in the tree, not on disk" for name in sorted(named[root] - on_disk)]
    assert differences == []


def test_the_tree_reader_reads_names_and_refuses_prose() -> None:
    text = ("```\nstatestore/   the bottom\n  a.py, b/, c (its note)     three\n"
            "                more words\n  d is prose   x\n```\n")
    named, unreadable = _in_tree(text)
    assert named["statestore/"] == {"a", "b", "c"}
    assert unreadable == ["statestore/: 'd is prose'"]
