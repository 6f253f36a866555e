"""The table catalog in PostgreSQL: create (with the initial partitions, in one
transaction; a create whose connection was lost around COMMIT looks for its table by
its fresh id), list, get, update properties, rename, delete (with all the table's rows);
and the store's instance id (the one row of ``sleeper_instance``, made by migration 011)."""

from __future__ import annotations

import uuid
from typing import Any, Mapping, Optional, Sequence

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.types.json import Json, Jsonb

from statestore.catalog import TableInfo
from statestore.errors import StateStoreUnavailableError, TableExistsError, TableNotFoundError
from statestore.partitions import Partition
from statestore.postgres.connections import PostgresConnection
from statestore.postgres.diff import write_diff
from statestore.postgres.rows import require_table, table_info
from statestore.properties import check_combination, split_update, validate_properties, validate_values
from statestore.schema import Schema
from statestore.state import TableState
from statestore.transactions import InitialisePartitions


class PostgresCatalog:
    """The table catalog of :class:`~statestore.postgres.store.PostgresStateStore`."""

    def __init__(self, db: PostgresConnection) -> None:
        self._db = db
        self._instance_id: Optional[str] = None

    def instance_id(self) -> str:
        """The row migration 011 made (read once per store object: it never changes). Should
        it be missing, one is inserted if still absent (``ON CONFLICT DO NOTHING``: an
        existing id is never rewritten) and the row read again in a fresh snapshot, so
        racing processes read the same id. A database without the table (migrations not
        applied) raises StateStoreUnavailableError saying so."""
        if self._instance_id is not None:
            return self._instance_id

        def read(cur: psycopg.Cursor[Any]) -> Optional[str]:
            row = cur.execute("SELECT instance_id FROM sleeper_instance").fetchone()
            return None if row is None else str(row[0])

        def insert(cur: psycopg.Cursor[Any]) -> None:
            cur.execute("INSERT INTO sleeper_instance (singleton, instance_id) VALUES (true, %s)"
                        " ON CONFLICT (singleton) DO NOTHING", (str(uuid.uuid4()),))

        try:
            found = self._db.read_one("read the instance id", read)
            if found is None:
                self._db.run("create the instance id", insert, idempotent=True)
                found = self._db.read_one("read the instance id", read)
        except pg_errors.UndefinedTable as e:
            raise StateStoreUnavailableError(
                "the state store has no instance id: its migrations are not applied (011_instance_id.sql)") from e
        if found is None:
            raise StateStoreUnavailableError("the state store's instance id could not be read after creating it")
        self._instance_id = found
        return found

    # ----- catalog --------------------------------------------------------------------
    def create_table(self, name: str, schema: Schema, partitions: Sequence[Partition],
                     properties: Optional[Mapping[str, str]] = None) -> TableInfo:
        props = validate_properties(properties or {})
        init = InitialisePartitions(tuple(partitions))
        table_id = uuid.uuid4().hex

        def fn(cur: psycopg.Cursor[Any]) -> TableInfo:
            row = cur.execute(
                "INSERT INTO tables (table_id, name, schema, properties) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (name) DO NOTHING RETURNING table_id",
                (table_id, name, Json(schema.to_dict()), Jsonb(props))).fetchone()
            if row is None:
                raise TableExistsError(f"table {name!r} already exists")
            state = TableState()
            init.validate(state)
            init.apply(state)
            write_diff(cur, table_id, TableState(), state)
            return TableInfo(table_id, name, schema, props)

        try:
            return self._db.run(f"create table {name!r}", fn)
        except StateStoreUnavailableError as e:
            # the connection was lost, perhaps after COMMIT: the fresh id says whether it applied
            if not isinstance(e.__cause__, psycopg.OperationalError):
                raise
            try:
                found = self.get_table(name)
            except (StateStoreUnavailableError, TableNotFoundError):
                raise e from None
            if found.table_id != table_id:
                raise e from None
            return found

    def list_tables(self) -> list[TableInfo]:
        def fn(cur: psycopg.Cursor[Any]) -> list[TableInfo]:
            cur.execute("SELECT table_id, name, schema, properties FROM tables ORDER BY name")
            return [table_info(r) for r in cur.fetchall()]

        return self._db.read_one("list tables", fn)

    def get_table(self, name: str) -> TableInfo:
        def fn(cur: psycopg.Cursor[Any]) -> TableInfo:
            return table_info(require_table(cur, name))

        return self._db.read_one(f"get table {name!r}", fn)

    def update_properties(self, name: str, properties: Mapping[str, str]) -> TableInfo:
        to_set, to_clear = split_update(validate_values(properties))

        def fn(cur: psycopg.Cursor[Any]) -> TableInfo:
            row = cur.execute("UPDATE tables SET properties = (properties || %s) - %s::text[] WHERE name = %s"
                              " RETURNING table_id, name, schema, properties",
                              (Jsonb(to_set), list(to_clear), name)).fetchone()
            if row is None:
                raise TableNotFoundError(f"table {name!r} does not exist")
            info = table_info(row)
            check_combination(info.properties)  # raising rolls the update back
            return info

        return self._db.run(f"update properties of {name!r}", fn)

    def rename_table(self, old: str, new: str) -> TableInfo:
        def fn(cur: psycopg.Cursor[Any]) -> TableInfo:
            table_id = require_table(cur, old)[0]
            if cur.execute("SELECT 1 FROM tables WHERE name = %s", (new,)).fetchone() is not None:
                raise TableExistsError(f"table {new!r} already exists")
            row = cur.execute("UPDATE tables SET name = %s WHERE table_id = %s"
                              " RETURNING table_id, name, schema, properties", (new, table_id)).fetchone()
            assert row is not None  # the row was read above in this transaction
            return table_info(row)

        return self._db.run(f"rename table {old!r}", fn)

    def delete_table(self, name: str) -> TableInfo:
        def fn(cur: psycopg.Cursor[Any]) -> TableInfo:
            row = cur.execute("DELETE FROM tables WHERE name = %s RETURNING table_id, name, schema, properties",
                              (name,)).fetchone()
            if row is None:
                raise TableNotFoundError(f"table {name!r} does not exist")
            for table in ("file_references", "files", "partitions", "jobs", "commit_ids", "state_changes",
                          "state_change_horizon", "table_deletes", "table_history"):
                cur.execute(sql.SQL("DELETE FROM {} WHERE table_id = %s").format(sql.Identifier(table)), (row[0],))
            return table_info(row)

        return self._db.run(f"delete table {name!r}", fn)
