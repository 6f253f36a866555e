"""Bulk import: a Spark job sorts many input files into a table in one commit (see
:mod:`sleeper_ops.bulk_import.job` for the guarantees; the Spark side is in
:mod:`sleeper_ops.spark.bulk_driver` and :mod:`sleeper_ops.spark.bulk_executor`)."""
