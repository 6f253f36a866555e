"""The ``sleeper_default`` connection that ``sleeper airflow`` and ``sleeper cluster`` write
into Airflow's metadata database, so the UI lists it, the REST API reads it and its Test
button (``POST /api/v2/connections/test``, enabled by both: ``[core] test_connection =
Enabled``) reaches the Sleeper they run with.

* ``sleeper airflow``: the connection names the home (:func:`standalone_connection`:
  extra ``config_home``), so a task opens exactly the Sleeper ``SLEEPER_HOME`` configures
  and the connection holds no secret;
* ``sleeper cluster``: the fields its processes are given as ``AIRFLOW_CONN_SLEEPER_DEFAULT``
  (:func:`sleeper_ops.cluster.environment.sleeper_connection`), the same connection
  (Airflow reads the environment first, so the database copy shows what they use).

:func:`write_connection` runs inside :mod:`sleeper_ops.orchestration.cli_batch` (the batch
that migrates the database, command :data:`COMMAND`), with Airflow already imported. Its
guarantees: a connection of that id is created when missing and rewritten when a previous
start wrote it (its description starts with :data:`WRITTEN_BY`); one created by anybody
else is kept as it is, and the line it prints (in the batch's log) says so: it is never
overwritten.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping

from sleeper_ops.config import SleeperConfig

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

#: the cli_batch command that writes a connection: ``[COMMAND, conn_id, fields as JSON, writer]``
COMMAND = "sleeper-connection"
#: how the description of a connection written here starts
WRITTEN_BY = "Written by sleeper"
CONN_ID = "sleeper_default"


def standalone_connection(config: SleeperConfig) -> dict[str, Any]:
    """The ``sleeper_default`` of ``sleeper airflow``: the Sleeper of ``config.home``'s
    ``sleeper.toml`` (extra ``config_home``), as the tasks' ``SLEEPER_HOME`` gives it."""
    return {"conn_type": "sleeper", "extra": {"config_home": str(config.home)}}


def connection_command(fields: Mapping[str, Any], writer: str, conn_id: str = CONN_ID) -> list[str]:
    """The cli_batch command writing ``fields`` as ``conn_id`` (see the module docstring);
    ``writer`` (``sleeper airflow``, ``sleeper cluster``: it starts with ``sleeper``) goes in its
    description."""
    return [COMMAND, conn_id, json.dumps(dict(fields)), writer]


def write_connection(conn_id: str, fields: Mapping[str, Any], writer: str, session: Session) -> str:
    """Create or rewrite ``conn_id`` in ``session`` (Airflow's metadata database), unless
    someone else created it; the line saying which (see the module docstring)."""
    from airflow.models.connection import Connection
    from sqlalchemy import select

    description = f"Written by {writer} at each start: {describe(fields)}"
    extra = fields.get("extra")
    new: dict[str, Any] = {"conn_type": str(fields["conn_type"]), "host": fields.get("host"),
                           "login": fields.get("login"), "password": fields.get("password"),
                           "schema": fields.get("schema"), "port": fields.get("port"),
                           "extra": json.dumps(extra) if isinstance(extra, dict) else extra}
    existing = session.scalar(select(Connection).where(Connection.conn_id == conn_id).limit(1))
    if existing is None:
        session.add(Connection(conn_id=conn_id, description=description, **new))
        return f"connection {conn_id} created: {describe(fields)}"
    if not (existing.description or "").startswith(WRITTEN_BY):
        return (f"connection {conn_id} kept as it is (not written by {writer}; tasks use it): "
                f"delete it for {writer} to write its own")
    for name, value in new.items():
        setattr(existing, name, value)
    existing.description = description
    return f"connection {conn_id} rewritten: {describe(fields)}"


def describe(fields: Mapping[str, Any]) -> str:
    """Where a Sleeper connection's fields point, without secrets."""
    extra = fields.get("extra") or {}
    if isinstance(extra, str):
        extra = json.loads(extra)
    if extra.get("config_home"):
        return f"the Sleeper of {extra['config_home']}/sleeper.toml"
    store = extra.get("state_store") or "postgres"
    where = f"{store} state store" + (f" at {fields['host']}" if fields.get("host") else "")
    return f"{where}, object store {extra.get('object_store_uri') or 'data'}"


def run(conn_id: str, fields_json: str, writer: str) -> int:
    """The cli_batch command :data:`COMMAND`: write the connection, print the line; 0."""
    from airflow.utils.session import create_session

    with create_session() as session:
        line = write_connection(conn_id, json.loads(fields_json), writer, session)
    print(line, flush=True)
    return 0
