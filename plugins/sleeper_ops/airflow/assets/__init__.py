"""Assets: the ``sleeper://`` URI (its handler and OpenLineage conversion) and the events a commit adds."""

from sleeper_ops.airflow.moved import old_names

#: the previous release's names of this path, with a DeprecationWarning (removed in the next release)
__getattr__ = old_names(__name__)
