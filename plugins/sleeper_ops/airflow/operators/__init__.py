"""The Sleeper operators, one module per kind of work, each a thin class over the hook and
the task runner (:mod:`sleeper_ops.airflow.task_runner`):

- ``base``: :class:`SleeperOperator` (table, connection, link, ``Stats``, lineage);
- ``ingest``: :class:`SleeperIngestOperator`, :class:`SleeperIngestBatcherOperator`;
- ``maintenance``: :class:`SleeperSplitOperator`, :class:`SleeperGcOperator`, :class:`SleeperFlushOperator`;
- ``compaction``: :class:`SleeperCompactionOperator` and the create / run / report operators;
- ``spark_compaction``: :class:`SleeperSparkCompactionOperator` (spark-submit or the Spark service);
- ``bulk_import``: :class:`SleeperBulkImportOperator` (Spark);
- ``emr``: :class:`SleeperEmrServerlessStartJobOperator` (bulk import on EMR Serverless);
- ``export``: :class:`SleeperExportOperator`.
"""

from sleeper_ops.airflow.moved import old_names

#: the previous release's names of this path, with a DeprecationWarning (removed in the next release)
__getattr__ = old_names(__name__)
