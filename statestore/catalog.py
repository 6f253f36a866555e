"""The table catalog entry: name, id, schema and properties."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from statestore.properties import PROPERTY_DEFS, effective_properties, parse_size
from statestore.schema import Schema


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
        return (self.get("sleeper.table.online") or "true").lower() == "true"

    def all_properties(self) -> dict[str, Optional[str]]:
        return effective_properties(self.properties)
