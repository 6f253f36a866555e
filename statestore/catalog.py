"""The table catalog entry: name, id, schema and properties."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from statestore.errors import TableNameError
from statestore.properties import ONLINE, PROPERTY_DEFS, effective_properties, parse_size
from statestore.schema import Schema

#: Most characters in a table name: its DAGs carry the tag ``table:<name>``, and Airflow
#: takes tags of at most 100 characters (``airflow.sdk.definitions.dag.TAG_MAX_LEN``); its
#: longest DAG id, ``sleeper_<name>_ingest_batcher``, is then 117 of Airflow's 250.
MAX_TABLE_NAME = 94
#: A table's name is part of its DAG ids (``sleeper_<name>_compaction``), its DAG tag
#: (``table:<name>``), asset URIs (``sleeper://<name>``), REST paths and SQL (quoted when
#: it holds ``-`` or ``.``): Airflow's own key rule
#: (``airflow.utils.helpers.KEY_REGEX``, ``[\w.-]+`` without ``..``), narrowed to ASCII,
#: which asset URIs need, and to the tag's length. Object keys use the table id, not the name.
TABLE_NAME_RULE = (f"a table name is 1 to {MAX_TABLE_NAME} ASCII letters, digits, '_', '-' and '.' (no '..'), "
                   "so it can be part of Airflow DAG ids, DAG tags and asset URIs")
_TABLE_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")


def table_name_problem(name: str) -> Optional[str]:
    """Why ``name`` cannot be a table's name (the rule, with the name), or None if it can."""
    if _TABLE_NAME_RE.fullmatch(name) and ".." not in name and len(name) <= MAX_TABLE_NAME:
        return None
    return f"{name!r} cannot be a table name: {TABLE_NAME_RULE}"


def check_table_name(name: str) -> None:
    """Refuse (:class:`TableNameError`) a name that cannot become DAG ids and asset URIs."""
    problem = table_name_problem(name)
    if problem is not None:
        raise TableNameError(problem)


@dataclass(frozen=True)
class TableInfo:
    """One table. ``properties`` holds only the properties set explicitly.

    The table id never changes; the name may (rename). Online/offline is the
    ``sleeper.table.online`` property.
    """

    table_id: str
    name: str
    schema: Schema
    properties: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> Optional[str]:
        """The value of a property, falling back to its default."""
        return self.properties.get(name, PROPERTY_DEFS[name].default)

    def get_int(self, name: str) -> int:
        v = self.get(name)
        assert v is not None, name
        return int(v)

    def get_size(self, name: str) -> int:
        v = self.get(name)
        assert v is not None, name
        return parse_size(v)

    @property
    def online(self) -> bool:
        return (self.get(ONLINE) or "true").lower() == "true"

    def all_properties(self) -> dict[str, Optional[str]]:
        return effective_properties(self.properties)
