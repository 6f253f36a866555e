"""Sleeper on Airflow: the data plane, operations, CLI and Python API.

``from sleeper_ops import Sleeper`` is the way in (:mod:`sleeper_ops.api`). The package
imports fast and lazily: importing ``sleeper_ops`` itself loads nothing but
:mod:`sleeper_ops.io.memory_pool`, which picks Arrow's memory pool (Airflow's
providers manager imports ``sleeper_ops.airflow.get_provider_info`` at every start), and
Airflow, Spark, boto3 and psycopg are imported only by the modules that adapt them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sleeper_ops.io.memory_pool import prefer_jemalloc

# before any module of ours loads pyarrow: its first pass in a new process is about twice
# as fast on jemalloc as on its default pool (sleeper_ops.io.memory_pool)
prefer_jemalloc()

if TYPE_CHECKING:
    from sleeper_ops.api import Sleeper, Table

__all__ = ["Sleeper", "Table"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from sleeper_ops import api

        return getattr(api, name)
    raise AttributeError(f"module 'sleeper_ops' has no attribute {name!r}")
