"""Operator extra links: the table's status page."""

from sleeper_ops.airflow.moved import old_names

#: the previous release's names of this path, with a DeprecationWarning (removed in the next release)
__getattr__ = old_names(__name__)
