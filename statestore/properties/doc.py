"""The table of every table property, drawn from the registry, that
``docs/usage/tables-and-properties.md`` holds between :data:`BEGIN` and :data:`END`.

``python -m statestore.properties.doc`` prints it; ``python -m statestore.properties.doc
--update docs/usage/tables-and-properties.md`` rewrites the table in that page.
``tests/unit/statestore/test_properties_doc.py`` fails when the page and the registry differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from statestore.properties.definitions import PROPERTY_DEFS

BEGIN = "<!-- properties table: drawn from statestore/properties by `python -m statestore.properties.doc` -->"
END = "<!-- end of the properties table -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def properties_table() -> str:
    """Every property in registry order: name, default, what it does, the values it takes
    (a Markdown table)."""
    rows = ["| Property | Default | What it does | Values |", "| --- | --- | --- | --- |"]
    for prop in PROPERTY_DEFS.values():
        default = "(unset)" if prop.default is None else f"`{prop.default}`"
        rows.append(f"| `{prop.name}` | {default} | {_cell(prop.description)} | {_cell(prop.values)} |")
    return "\n".join(rows) + "\n"


def table_in(page: str) -> Optional[str]:
    """The table between the markers of ``page``, or None if it has none."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        return None
    return page[start + len(BEGIN):end].strip("\n") + "\n"


def updated(page: str) -> str:
    """``page`` with the table between its markers drawn anew (ValueError if it has no markers)."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no {BEGIN!r} ... {END!r} markers")
    return f"{page[:start + len(BEGIN)]}\n{properties_table()}{page[end:]}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m statestore.properties.doc", description=__doc__)
    parser.add_argument("--update", metavar="PAGE", type=Path,
                        help="rewrite the table between the markers of this Markdown page")
    args = parser.parse_args(argv)
    if args.update is None:
        sys.stdout.write(properties_table())
    else:
        args.update.write_text(updated(args.update.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
