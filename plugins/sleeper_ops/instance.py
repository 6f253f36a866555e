"""The identity of a Sleeper instance: which state store it is, with no credentials.

Lineage (``sleeper://<instance>`` as the OpenLineage namespace of its tables) and
links name an instance by :func:`instance_of`: the PostgreSQL server and database
(``postgres.<host>:<port>.<database>``), the DynamoDB region, endpoint and table prefix
(``dynamodb.<region>.<prefix>``), or ``embedded.<home>`` for the embedded server. A user
name, password or key never appears.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from sleeper_ops.config import SleeperConfig

_KEYWORD = re.compile(r"(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)")


def _dsn_parts(dsn: str) -> tuple[str, str, str]:
    """(host, port, database) of a libpq DSN, URI or key=value form."""
    if "://" in dsn:
        u = urlsplit(dsn)
        return unquote(u.hostname or "localhost"), str(u.port or 5432), unquote(u.path.lstrip("/") or "postgres")
    kv = {k: v.strip("'") for k, v in _KEYWORD.findall(dsn)}
    return kv.get("host", "localhost"), kv.get("port", "5432"), kv.get("dbname", kv.get("user", "postgres"))


def instance_of(config: SleeperConfig) -> str:
    """The instance's name (see the module docstring)."""
    if config.state_store_backend == "dynamodb":
        d = config.dynamodb
        where = urlsplit(d.endpoint_url).netloc if d.endpoint_url else "aws"
        return f"dynamodb.{d.region}.{where}.{d.table_prefix}".rstrip(".-")
    if config.state_store_backend == "postgres":
        if config.state_store_dsn:
            host, port, db = _dsn_parts(config.state_store_dsn)
            return f"postgres.{host}:{port}.{db}"
        return f"embedded.{config.embedded_pg_dir}"
    return config.state_store_backend
