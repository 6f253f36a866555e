"""Sleeper on Airflow: the data plane, operations, CLI and Python API.

The package imports fast: Airflow, Spark, boto3 and psycopg are imported only by
the modules that adapt them.
"""

from sleeper_ops.api import Sleeper, Table

__all__ = ["Sleeper", "Table"]
