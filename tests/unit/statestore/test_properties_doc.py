"""``docs/usage/tables-and-properties.md`` lists every table property of the registry, as
the registry has it, and names no property the registry lacks."""

from __future__ import annotations

import re
from pathlib import Path

from statestore.properties import PROPERTY_DEFS
from statestore.properties.doc import BEGIN, END, main, properties_table, table_in, updated

PAGE = Path(__file__).resolve().parents[3] / "docs" / "usage" / "tables-and-properties.md"
FIX = "python -m statestore.properties.doc --update docs/usage/tables-and-properties.md"


def test_the_properties_page_holds_the_registry_table():
    assert table_in(PAGE.read_text(encoding="utf-8")) == properties_table(), f"the page is stale: run {FIX}"


def test_the_properties_page_names_no_property_the_registry_lacks():
    names = set(re.findall(r"sleeper\.table\.[a-z0-9_]+(?:\.[a-z0-9_]+)*", PAGE.read_text(encoding="utf-8")))
    assert names - set(PROPERTY_DEFS) == set()


def test_the_table_lists_every_property_once_with_its_default():
    table = properties_table()
    for name, prop in PROPERTY_DEFS.items():
        assert table.count(f"| `{name}` |") == 1, name
        assert f"| `{name}` | {'(unset)' if prop.default is None else f'`{prop.default}`'} |" in table


def test_updating_a_page_rewrites_only_the_table(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text(f"before\n{BEGIN}\n| old |\n{END}\nafter\n", encoding="utf-8")
    assert main(["--update", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == f"before\n{BEGIN}\n{properties_table()}{END}\nafter\n"
    assert updated(page.read_text(encoding="utf-8")) == page.read_text(encoding="utf-8")
    assert main([]) == 0 and capsys.readouterr().out == properties_table()
